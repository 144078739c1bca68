"""On the meta device, run attention through the kernel the CPU would choose, so meta counts equal real ones.

``torch.nn.functional.scaled_dot_product_attention`` picks a fused kernel per device: on the CPU the flash kernel
(``_scaled_dot_product_flash_attention_for_cpu``, which saves its output and log-sum-exp for backward), on the
meta device always the math decomposition (which saves the full attention matrix). A dry run that builds models on
the meta device would then count more saved activation bytes than the real run holds. Inside :func:`cpu_attention`
an attention call on meta tensors asks the CPU's own selector (``torch._fused_sdp_choice``, on uninitialised CPU
tensors of the same shapes and strides) and, when it would take the flash kernel, calls that kernel's meta
implementation instead. FLOPs are unchanged (both paths count ``sdpa_flop_count``); only the saved tensors differ.

``nn.MultiheadAttention`` in eval mode without autograd takes PyTorch's fused "fast path"
(``_native_multi_head_attention``) on CPU and CUDA tensors only; inside the block it takes it on meta tensors too,
as the CPU would (a frozen CLIP tower runs that way).

Many meta kernels are Python (``torch._refs`` and ``torch._decomp``: a meta ``relu`` costs 0.3 ms, a training batch
norm 1.5 ms, against 25 us for a convolution), so a measurement on meta tensors spends most of its time computing
output shapes. A meta kernel reads only its inputs' metadata, so its answer is a pure function of the op, the
inputs' shapes, strides, offsets and dtypes and the other arguments: :func:`memoised_meta_kernels` remembers each
answer (:class:`MetaShapeMemo`) and builds the outputs of a repeated call directly.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


def _cpu_like(t: torch.Tensor) -> torch.Tensor:
    """Uninitialised CPU memory of ``t``'s shape, strides and dtype (the selector reads only those)."""
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype)


def cpu_would_use_flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                        dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> bool:
    """Whether the CPU's kernel selector picks the flash kernel for attention of these shapes."""
    from torch.nn.attention import SDPBackend

    q, k, v = (_cpu_like(t) for t in (query, key, value))
    mask = _cpu_like(attn_mask) if isinstance(attn_mask, torch.Tensor) else None
    choice = torch._fused_sdp_choice(q, k, v, mask, dropout_p, is_causal, scale=scale)
    return int(choice) == SDPBackend.FLASH_ATTENTION.value


def _routed(original: Any) -> Any:
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: float | None = None, **kwargs: Any) -> Any:
        if isinstance(query, torch.Tensor) and query.is_meta and not kwargs.get("enable_gqa", False) \
                and cpu_would_use_flash(query, key, value, attn_mask, dropout_p, is_causal, scale):
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                        scale=scale, **kwargs)

    return scaled_dot_product_attention


@contextmanager
def cpu_attention() -> Iterator[None]:
    """Within the block, attention on meta tensors takes the CPU's kernel (see the module docstring).

    ``torch.nn.functional.scaled_dot_product_attention`` is replaced for the block's duration: a torch function
    mode would not see the calls made inside other torch functions (``multi_head_attention_forward``)."""
    from torch.nn.modules import activation

    original, device_check = F.scaled_dot_product_attention, activation._check_arg_device
    F.scaled_dot_product_attention = _routed(original)  # type: ignore[assignment]
    activation._check_arg_device = _fast_path_device(device_check)
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original  # type: ignore[assignment]
        activation._check_arg_device = device_check


def _fast_path_device(original: Any) -> Any:
    def check(x: torch.Tensor | None) -> bool:
        return bool(original(x)) or (x is not None and x.is_meta)

    return check


_ATOMS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)
_Spec = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]


def _tensor_key(t: torch.Tensor) -> tuple[Any, ...] | None:
    """What a meta kernel can read of ``t``: a plain strided meta tensor's metadata, else ``None``."""
    if not t.is_meta or t.layout != torch.strided or type(t) not in (torch.Tensor, torch.nn.Parameter) \
            or t.is_conj() or t.is_neg():
        return None
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.untyped_storage().nbytes())


def _arg_key(value: Any, tensors: list[torch.Tensor]) -> Any:
    """A hashable stand-in for one argument (tensors collected in ``tensors``); ``None`` for "do not remember"."""
    if isinstance(value, torch.Tensor):
        key = _tensor_key(value)
        if key is not None:
            tensors.append(value)
        return key
    if isinstance(value, _ATOMS):
        return (type(value), value)  # 1 and 1.0 and True differ to a kernel
    if isinstance(value, (list, tuple)):
        keys = tuple(_arg_key(v, tensors) for v in value)
        return None if any(k is None for k in keys) else (type(value), keys)
    return None


_Kind = tuple[str, tuple[int, ...]]
_kinds: dict[Any, _Kind | None] = {}


def _op_kind(func: Any) -> _Kind | None:
    """What ``func`` returns, from its schema: ``("new", ())`` (only new tensors), ``("written", (i, ...))`` (the
    arguments at those positions, written in place: ``add_``, ``clamp_``, an ``out=``), or ``None`` (views, nothing)."""
    if func in _kinds:
        return _kinds[func]
    schema = func._schema
    returns, arguments = schema.returns, schema.arguments
    kind: _Kind | None = None
    if returns and all(r.alias_info is None and str(r.type) in ("Tensor", "List[Tensor]") for r in returns):
        kind = ("new", ())
    elif returns and all(r.alias_info is not None and r.alias_info.is_write and str(r.type) == "Tensor"
                         for r in returns):
        owners = [[i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write
                   and a.alias_info.before_set == r.alias_info.before_set] for r in returns]
        if all(len(o) == 1 for o in owners):
            kind = ("written", tuple(o[0] for o in owners))
    _kinds[func] = kind
    return kind


def _argument(func: Any, index: int, args: Any, kwargs: Any) -> Any:
    return args[index] if index < len(args) else kwargs.get(func._schema.arguments[index].name)


def _new_outputs(out: Any, inputs: list[torch.Tensor]) -> tuple[str, tuple[_Spec | None, ...]] | None:
    """How to rebuild ``out`` (tensors that own a fresh storage of exactly their size, or ``None`` where a backward
    kernel was asked for no gradient), else ``None``."""
    kind, items = ("one", (out,)) if isinstance(out, torch.Tensor) or out is None else (
        ("tuple", tuple(out)) if isinstance(out, tuple) else ("list", tuple(out)) if isinstance(out, list)
        else ("", ()))
    if not kind:
        return None
    taken = {t.untyped_storage()._cdata for t in inputs}
    specs: list[_Spec | None] = []
    for t in items:
        if t is None:
            specs.append(None)
            continue
        if not isinstance(t, torch.Tensor) or _tensor_key(t) is None or t.storage_offset() != 0 \
                or t.untyped_storage()._cdata in taken:
            return None
        taken.add(t.untyped_storage()._cdata)
        spec = (tuple(t.shape), t.stride(), t.dtype)
        if torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta").untyped_storage().nbytes() \
                != t.untyped_storage().nbytes():
            return None
        specs.append(spec)
    return kind, tuple(specs)


def _build(spec: _Spec | None) -> torch.Tensor | None:
    return None if spec is None else torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta")


class MetaShapeMemo(TorchDispatchMode):
    """Answers an op on meta tensors from an earlier call with the same op, metadata and arguments.

    Remembered: calls whose arguments are plain meta tensors and constants and that leave their inputs' metadata as
    they were, of two kinds. An op whose schema returns new tensors (an in-place batch norm's outputs too) that own
    storages of exactly their size: a repeated call returns new tensors of the remembered shapes, strides and dtypes.
    An op that writes into an argument and returns it (``clamp_``, ``add_``; on meta tensors a write changes nothing):
    a repeated call returns that argument. Any other call runs its kernel. Storages stay distinct, so saved-activation
    bytes are counted as without the memo.
    """

    LIMIT = 50_000  # remembered calls (a few hundred bytes each) before the memo starts again

    def __init__(self, memo: dict[Any, Any]) -> None:
        super().__init__()
        self.memo = memo

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        kind = _op_kind(func) if isinstance(func, torch._ops.OpOverload) else None
        if kind is None:
            return func(*args, **kwargs)
        tensors: list[torch.Tensor] = []
        key = (func, torch.get_default_dtype(), _arg_key(args, tensors), _arg_key(tuple(sorted(kwargs.items())),
                                                                                   tensors))
        if key[2] is None or key[3] is None or not tensors:
            return func(*args, **kwargs)
        hit = self.memo.get(key)
        if hit is not None:
            shape, specs = hit
            if kind[0] == "written":
                written = tuple(_argument(func, i, args, kwargs) for i in kind[1])
                return written[0] if len(written) == 1 else written
            built = [_build(s) for s in specs]
            return built[0] if shape == "one" else tuple(built) if shape == "tuple" else built
        before = [_tensor_key(t) for t in tensors]
        out = func(*args, **kwargs)
        remembered: tuple[str, tuple[Any, ...]] | None
        if kind[0] == "written":
            written = tuple(_argument(func, i, args, kwargs) for i in kind[1])
            same = out is written[0] if len(written) == 1 else (
                isinstance(out, tuple) and len(out) == len(written) and all(o is w for o, w in zip(out, written)))
            remembered = ("written", ()) if same else None
        else:
            remembered = _new_outputs(out, tensors)
        if remembered is not None and [_tensor_key(t) for t in tensors] == before:
            if len(self.memo) >= self.LIMIT:
                self.memo.clear()
            self.memo[key] = remembered
        return out


_memo: dict[Any, Any] = {}
_active = threading.local()


@contextmanager
def memoised_meta_kernels() -> Iterator[None]:
    """Within the block, repeated meta kernel calls are answered from :class:`MetaShapeMemo` (one memo per process:
    an answer depends on the call alone, never on the model that made it). Inside a block already open (a dry run's
    measurements) nothing more is pushed: the open memo sits below every mode entered since."""
    if getattr(_active, "depth", 0):
        yield
        return
    _active.depth = 1
    try:
        with MetaShapeMemo(_memo):
            yield
    finally:
        _active.depth = 0


__all__ = ["MetaShapeMemo", "cpu_attention", "cpu_would_use_flash", "memoised_meta_kernels"]
