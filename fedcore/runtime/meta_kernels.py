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
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F


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


__all__ = ["cpu_attention", "cpu_would_use_flash"]
