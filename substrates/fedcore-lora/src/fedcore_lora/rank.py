"""Changing the rank of LoRA adapters between rounds (peft cannot resize an adapter in place).

* ``svd`` (default): replace ``(B, A)`` by the best rank-r' approximation of ``B A`` (Eckart-Young),
  computed on the r x r core of two thin QRs, so the dense d x h product is never formed:
  ``B = Q_B R_B``, ``Aᵀ = Q_A R_A``, ``R_B R_Aᵀ = U S Vᵀ``, ``B' = Q_B U_r S_r^½``, ``A' = S_r^½ V_rᵀ Q_Aᵀ``.
  Exact (``B'A' = BA``) whenever rank(BA) <= r'.
* ``slice``: keep the first r' columns of B and rows of A (cheap, discards arbitrary components).

Growing the rank pads B with zero columns and A with seeded Gaussian rows: ``B A`` is unchanged and
the new directions still get gradients. The adapter's scaling is kept, so ``scaling · B A`` is the
same function before and after.
"""
from __future__ import annotations

import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore_lora.adapters import ADAPTER, lora_layers

MODES = ("svd", "slice")


def truncate_factors(b: torch.Tensor, a: torch.Tensor, rank: int, mode: str = "svd"
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B', A')`` of rank ``rank`` from ``B`` (d x r) and ``A`` (r x h), ``rank <= r``."""
    r = a.shape[0]
    if b.shape[1] != r:
        raise ValueError(f"B has {b.shape[1]} columns but A has {r} rows")
    if not 1 <= rank <= r:
        raise ValueError(f"rank={rank} must be in [1, {r}] to truncate factors of rank {r}")
    if mode == "slice":
        return b[:, :rank].clone(), a[:rank].clone()
    if mode != "svd":
        raise ConfigError(f"truncation mode={mode!r}; choose one of: {', '.join(MODES)}")
    dtype = b.dtype
    b64, a64 = b.to(torch.float64), a.to(torch.float64)
    qb, rb = torch.linalg.qr(b64)            # d x k, k x r   (k = min(d, r))
    qa, ra = torch.linalg.qr(a64.T)          # h x k', k' x r
    u, s, vh = torch.linalg.svd(rb @ ra.T)   # k x k'
    k = min(rank, s.shape[0])
    root = s[:k].sqrt()
    b_new = qb @ (u[:, :k] * root)
    a_new = (root[:, None] * vh[:k]) @ qa.T
    if k < rank:  # the factors' inner dimension was larger than their true rank bound: pad exactly
        b_new = torch.cat([b_new, b64.new_zeros(b.shape[0], rank - k)], 1)
        a_new = torch.cat([a_new, a64.new_zeros(rank - k, a.shape[1])], 0)
    return b_new.to(dtype).contiguous(), a_new.to(dtype).contiguous()


def grow_factors(b: torch.Tensor, a: torch.Tensor, rank: int, *, std: float, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to ``rank``: zero columns in B, Gaussian rows in A, so ``B A`` is unchanged."""
    extra = rank - a.shape[0]
    rows = torch.randn(extra, a.shape[1], generator=generator, dtype=a.dtype).to(a.device) * std
    return torch.cat([b, b.new_zeros(b.shape[0], extra)], 1), torch.cat([a, rows], 0)


def resize_factors(b: torch.Tensor, a: torch.Tensor, rank: int, *, mode: str = "svd",
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if rank < a.shape[0]:
        return truncate_factors(b, a, rank, mode)
    if rank > a.shape[0]:
        return grow_factors(b, a, rank, std=1.0 / rank, generator=generator or torch.Generator().manual_seed(0))
    return b.clone(), a.clone()


def set_rank(model: nn.Module, rank: int, *, mode: str = "svd", seed: int = 0, setting: str = "rank") -> bool:
    """Resize every adapter of ``model`` to ``rank`` in place; returns whether anything changed.

    The new factors replace peft's ``lora_A``/``lora_B`` modules (``requires_grad`` is kept) and
    ``r``/``lora_alpha`` are updated with the scaling held fixed.
    """
    if mode not in MODES:
        raise ConfigError(f"truncation={mode!r}; choose one of: {', '.join(MODES)}")
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"this {type(model).__name__} has no LoRA adapters to resize")
    for name, layer in layers.items():
        base = layer.get_base_layer()
        limit = min(base.in_features, base.out_features)
        if rank > limit:
            raise ConfigError(f"{setting}={rank} exceeds min(in_features, out_features)={limit} of layer {name!r}")
    gen = torch.Generator().manual_seed(seed)
    changed = False
    for layer in layers.values():
        a_mod, b_mod = layer.lora_A[ADAPTER], layer.lora_B[ADAPTER]
        if a_mod.out_features == rank:
            continue
        with torch.no_grad():
            b_new, a_new = resize_factors(b_mod.weight, a_mod.weight, rank, mode=mode, generator=gen)
        # on the adapter's device: a model on a GPU keeps its factors there, one on meta (a dry run) stays on meta
        device = a_mod.weight.device
        new_a = nn.Linear(a_mod.in_features, rank, bias=False, dtype=a_new.dtype, device=device)
        new_b = nn.Linear(rank, b_mod.out_features, bias=False, dtype=b_new.dtype, device=device)
        with torch.no_grad():
            new_a.weight.copy_(a_new)
            new_b.weight.copy_(b_new)
        new_a.weight.requires_grad_(a_mod.weight.requires_grad)
        new_b.weight.requires_grad_(b_mod.weight.requires_grad)
        layer.lora_A[ADAPTER], layer.lora_B[ADAPTER] = new_a, new_b
        scaling = layer.scaling[ADAPTER]
        layer.r[ADAPTER] = rank
        layer.lora_alpha[ADAPTER] = scaling * rank
        changed = True
    return changed


def product_mean(factors: list[tuple[torch.Tensor, torch.Tensor]], weights: list[float], rank: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Factors of rank ``rank`` for the weighted mean of the products ``Σ w_s B_s A_s`` (exact Eq. 9).

    Stacks the clients' factors (``[p_1 B_1 .. p_S B_S] [A_1; ..; A_S]`` equals the mean product)
    and truncates that with the QR-core SVD, so the dense product is never formed.
    """
    total = float(sum(weights))
    bs = torch.cat([b.to(torch.float64) * (w / total) for (b, _), w in zip(factors, weights)], 1)
    As = torch.cat([a.to(torch.float64) for _, a in factors], 0)
    b_new, a_new = truncate_factors(bs, As, min(rank, As.shape[0]), "svd")
    dtype = factors[0][0].dtype
    if b_new.shape[1] < rank:
        b_new = torch.cat([b_new, b_new.new_zeros(b_new.shape[0], rank - b_new.shape[1])], 1)
        a_new = torch.cat([a_new, a_new.new_zeros(rank - a_new.shape[0], a_new.shape[1])], 0)
    return b_new.to(dtype), a_new.to(dtype)
