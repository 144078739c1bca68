"""The cost model: FLOPs and memory of a client's share, measured from its real forward and backward.

``torch.utils.flop_counter.FlopCounterMode`` counts one forward+backward of the share's module on a
small batch of the client's own data; the result per sample is cached per distinct share shape
(module class, every parameter's name/shape/trainability, buffers, simple ``meta`` values, input
shape), so a run pays for it once per shape. Backward cost follows what autograd really does:
frozen weights get no weight gradients, so a LoRA or prompt share costs less than a whole model.
Activation memory is the bytes autograd saves for backward (``saved_tensors_hooks``), parameters
excluded, measured at the probe's batch and at one sample, so what does not grow with the batch (a text tower over
every class name, a prompt's token embeddings) is counted once. CPU fused attention is not in torch's FLOP registry;
its formula is added here.

The same measurement runs on the meta device (a dry run, ``fedcore plan``): shapes alone decide FLOPs and saved
bytes, saved tensors are told apart by their storage (not its address, which is 0 for every meta tensor) and
attention takes the kernel the CPU would take (:mod:`fedcore.runtime.meta_kernels`), so a meta measurement equals
the measurement on real tensors of the same shapes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import contextlib
import copy
import functools
import hashlib
import operator
from typing import Any

import attrs
import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore.types import Share

aten = torch.ops.aten


def _cpu_sdpa(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int], *args: Any,
              out_shape: Any = None, **kwargs: Any) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward(grad_out_shape: Sequence[int], query_shape: Sequence[int], key_shape: Sequence[int],
                       value_shape: Sequence[int], *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    from torch.utils import flop_counter

    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _native_mha(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int], embed_dim: int,
                num_head: int, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """``nn.MultiheadAttention``'s fused fast path (eval mode, no autograd): in-projections, attention, out-projection.

    Not in torch's FLOP registry, so a frozen tower that takes the fast path (CLIP's) would count nothing."""
    batch, nq, e = (int(d) for d in query_shape)
    nk = int(key_shape[1])
    projections = 2 * batch * e * e * (nq + 2 * nk + nq)  # q, k, v in; out
    attention = 4 * batch * nq * nk * e  # q @ k^T and attn @ v over all heads
    return projections + attention


def _extra_formulas() -> dict[Any, Any]:
    out: dict[Any, Any] = {aten._native_multi_head_attention: _native_mha}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        out[aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_sdpa
        out[aten._scaled_dot_product_flash_attention_for_cpu_backward] = _cpu_sdpa_backward
    return out


class ResourceError(ConfigError):
    """A client's share does not fit its device (memory)."""


@attrs.frozen(kw_only=True)
class ShareCost:
    """Per-sample FLOPs and the memory terms of one share shape."""

    forward_flops: float  # one forward pass, per sample
    train_flops: float  # forward + backward (of what is trainable), per sample
    param_bytes: int  # every parameter and buffer the client holds
    trainable_bytes: int  # trainable parameters (gradients have the same size)
    activation_bytes: float  # saved for backward, per sample
    activation_fixed_bytes: float = 0.0  # saved for backward whatever the batch (a text tower over every class name)

    def activations(self, batch_size: int) -> int:
        return int(self.activation_fixed_bytes + self.activation_bytes * batch_size)

    def memory_bytes(self, *, batch_size: int, optimizer_slots: int) -> int:
        """Parameters + gradients + optimizer state (``slots`` tensors per trainable parameter) + activations."""
        return int(self.param_bytes + self.trainable_bytes * (1 + optimizer_slots)) + self.activations(batch_size)

    def memory_breakdown(self, *, batch_size: int, optimizer_slots: int) -> dict[str, int]:
        return {"params": self.param_bytes, "grads": self.trainable_bytes,
                "optimizer": self.trainable_bytes * optimizer_slots, "activations": self.activations(batch_size)}


def _digest(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_meta:  # a dry run's share: shapes only
        return ("tensor", tuple(value.shape), str(value.dtype), "meta")
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        raw = (t.float() if t.dtype == torch.bfloat16 else t).numpy().tobytes()  # numpy has no bfloat16
        return ("tensor", tuple(t.shape), str(t.dtype), hashlib.blake2b(raw, digest_size=8).hexdigest())
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_digest(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _digest(v)) for k, v in value.items()))
    if attrs.has(type(value)):  # a typed meta record: its class and fields (a tensor field by content, not repr)
        fields = attrs.fields(type(value))
        return (type(value).__qualname__, *((f.name, _digest(getattr(value, f.name))) for f in fields))
    return repr(value)


def share_key(share: Share, example_shape: tuple[int, ...]) -> tuple[Any, ...]:
    """What makes two shares cost the same: structure, trainability, meta and input shape."""
    m = share.module
    params = tuple((n, tuple(p.shape), bool(p.requires_grad), str(p.dtype)) for n, p in m.named_parameters())
    buffers = tuple((n, tuple(b.shape)) for n, b in m.named_buffers())
    meta = tuple(sorted((str(k), _digest(v)) for k, v in share.meta.items()))
    return (type(m).__module__, type(m).__qualname__, params, buffers, meta, tuple(example_shape))


def _tensor_leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in _tensor_leaves(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensor_leaves(v)]
    return []


def storage_key(t: torch.Tensor) -> int:
    """Which storage a tensor views: the same number for every view of one live storage, on any device
    (``data_ptr`` is 0 for every meta tensor)."""
    return int(t.untyped_storage()._cdata)


META_FROM = 1_000_000
"""Parameters from which :func:`measure` counts a CPU share on the meta device (a micro CNN: 7 ms real, 18 ms meta;
ViT-Tiny: 0.9 s real, 0.6 s meta; the counts are equal)."""


def on_meta(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters and buffers live on the meta device (tied tensors stay tied); the
    real weights are not copied."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo.setdefault(id(p), nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad))
    for b in module.buffers():
        memo.setdefault(id(b), torch.empty_like(b, device="meta"))
    return copy.deepcopy(module, memo)


def measure(module: nn.Module, example: torch.Tensor) -> ShareCost:
    """Count one forward (no grad) and one forward+backward of ``module`` on ``example`` (a batch).

    ``module`` and ``example`` may live on the meta device: the counts are the same as on real tensors. A CPU
    share of ``META_FROM`` parameters or more is measured on a meta copy (shapes alone: three passes of a large model
    cost seconds on real tensors, a micro model's less than the meta device's dispatch); a module whose forward the
    meta device cannot run (data-dependent shapes or branches, tensors outside its parameters and buffers) is
    measured on its real tensors."""
    if example.device.type == "cpu" and sum(p.numel() for p in module.parameters()) >= META_FROM:
        try:
            return _measure(on_meta(module), example.to("meta"))
        except Exception:  # noqa: BLE001 - any failure on meta: the real tensors answer
            pass
    return _measure(module, example)


class _GlobalOnly:
    """A stand-in for ``FlopCounterMode``'s module tracker that attributes every FLOP to ``Global`` only.

    The tracker hooks every module call and, on the backward, every module output (``register_multi_grad_hook``);
    :func:`measure` reads only the total, which is the same sum either way."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _GlobalOnly:
        return self

    def __exit__(self, *args: Any) -> None:
        return None


def _total_flops_counter(formulas: dict[Any, Any]) -> Any:
    """``FlopCounterMode`` with fedcore's formulas, counting the total only (no per-module table)."""
    from torch.utils.flop_counter import FlopCounterMode  # imported here: workers that only run jobs skip it

    counter = FlopCounterMode(display=False, custom_mapping=formulas)
    if type(getattr(counter, "mod_tracker", None)).__name__ == "ModuleTracker":  # torch 2.4 to 2.14 at least; another
        counter.mod_tracker = _GlobalOnly()  # type: ignore[assignment]  # torch keeps its own tracker (same total)
    return counter


def _measure(module: nn.Module, example: torch.Tensor) -> ShareCost:
    # clone_module: deepcopy's semantics at a third of its cost (a third of a micro model's measurement went to it)
    from fedcore.builtin.clone import clone_module
    from fedcore.runtime.meta_kernels import cpu_attention, memoised_meta_kernels

    batch = int(example.shape[0])
    work = clone_module(module)  # the passes below train: the module given keeps its statistics and flags
    work.train()
    formulas = _extra_formulas()
    param_keys = {storage_key(p) for p in work.parameters()}
    kernels = cpu_attention() if example.is_meta else contextlib.nullcontext()
    memo = memoised_meta_kernels() if example.is_meta else contextlib.nullcontext()  # entered below the counters
    with torch.random.fork_rng(devices=[]), kernels, memo:
        torch.manual_seed(0)
        with _total_flops_counter(formulas) as fwd, torch.no_grad():
            work(example)
        with _total_flops_counter(formulas) as full:
            total = saved_bytes(work, example, param_keys)
        per_sample, fixed = total / batch, 0.0
        if batch >= 2:  # a one-sample pass separates what grows with the batch from what does not
            try:
                one = saved_bytes(work, example[:1], param_keys, backward=False)
            except (RuntimeError, ValueError):  # batch norm cannot train on one sample of a 1x1 map: stay linear
                one = None
            slope = (total - one) / (batch - 1) if one is not None else -1.0
            if one is not None and 0 <= slope <= one:
                per_sample, fixed = slope, one - slope
    params = sum(t.numel() * t.element_size() for t in list(work.parameters()) + list(work.buffers()))
    trainable = sum(p.numel() * p.element_size() for p in work.parameters() if p.requires_grad)
    return ShareCost(forward_flops=fwd.get_total_flops() / batch, train_flops=full.get_total_flops() / batch,
                     param_bytes=params, trainable_bytes=trainable, activation_bytes=per_sample,
                     activation_fixed_bytes=fixed)


def saved_bytes(module: nn.Module, example: torch.Tensor, param_keys: set[int], *, backward: bool = True) -> int:
    """Bytes autograd saves for backward in one forward of ``module`` on ``example`` (distinct storages, no
    parameters); with ``backward`` the backward runs too (its FLOPs are counted by a counter around the call),
    without it the graph is freed with the outputs."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key not in param_keys:
            saved[key] = max(saved.get(key, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(example)
    leaves = [t for t in _tensor_leaves(out) if t.requires_grad]
    if leaves and backward:
        functools.reduce(operator.add, (t.float().sum() for t in leaves)).backward()
    return sum(saved.values())


class CostModel:
    """Measures each distinct share shape once and remembers it (``cache``, ``measurements``)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[Any, ...], ShareCost] = {}
        self.measurements = 0

    def cost(self, share: Share, example: torch.Tensor) -> ShareCost:
        given = share.meta.get("flops_per_sample")
        key = share_key(share, tuple(example.shape[1:]))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        try:
            cost = measure(share.module, example)
        except Exception as exc:
            if given is None:
                raise ConfigError(
                    f"cannot measure the cost of a {type(share.module).__name__} share: its forward on an input of "
                    f"shape {tuple(example.shape)} raised {type(exc).__name__}: {exc}. Give the cost in the share: "
                    f"meta={{'flops_per_sample': (forward, forward_plus_backward)}}") from exc
            cost = ShareCost(forward_flops=0.0, train_flops=0.0, param_bytes=0, trainable_bytes=0, activation_bytes=0.0)
        if given is not None:  # a method that knows better (e.g. an endpoint-driven local update)
            fwd, train = given
            cost = attrs.evolve(cost, forward_flops=float(fwd), train_flops=float(train))
        self.cache[key] = cost
        self.measurements += 1
        return cost
