"""Width masks learned by back-propagation (Co-S2P Sec. 4.1, Eq. 2, Alg. 2).

One Bernoulli value per attention head, MLP hidden unit and output row of ``attn.proj`` / ``mlp.fc2``
(``PARTS``), drawn from P = sigmoid(I) with the straight-through estimator ``M + P - P.detach()``:
the forward pass sees the binary M, the backward pass sends dL/dM through P to the logits I.
Eq. 2's size term compares the kept fraction of the masked weights with R^width; with
``inputs=True`` a row kept in a layer whose inputs were pruned counts only its kept inputs.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from fedcore.errors import ConfigError
from fedcore_pruning import BlockMasks, ViTShape

PARTS = ("heads", "hidden", "attn_out", "mlp_out")
Logits = dict[str, torch.Tensor]  # part -> (blocks, units)


def part_sizes(shape: ViTShape) -> dict[str, int]:
    return {"heads": shape.num_heads, "hidden": shape.mlp_hidden, "attn_out": shape.embed_dim,
            "mlp_out": shape.embed_dim}


def initial_logits(shape: ViTShape, value: float) -> Logits:
    """Logits I for every block of the global model, all ``value`` (3.0: P ≈ 0.95, spec §7.7)."""
    return {part: torch.full((shape.depth, size), float(value)) for part, size in part_sizes(shape).items()}


def check_logits(logits: Mapping[str, torch.Tensor], shape: ViTShape) -> None:
    """Masks of the wrong shape are one error naming the part, its shape and the expected one."""
    for part, size in part_sizes(shape).items():
        if part not in logits:
            raise ConfigError(f"mask logits lack part {part!r}; expected parts {PARTS}")
        if tuple(logits[part].shape) != (shape.depth, size):
            raise ConfigError(f"mask {part} has shape {tuple(logits[part].shape)}; the model needs "
                              f"({shape.depth}, {size}) (blocks x {part})")


def ste_sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Binary M ~ Bernoulli(sigmoid(I)) in the forward pass, gradient dL/dM · P(1 - P) to I in the backward."""
    p = torch.sigmoid(logits)
    m = torch.bernoulli(p.detach(), generator=generator)
    return m + p - p.detach()


def block_masks(masks: Mapping[str, torch.Tensor], blocks: int, residual: bool = True) -> list[BlockMasks | None]:
    """``BlockMasks`` for the first ``blocks`` blocks from part -> (blocks, units) tensors."""
    out: list[BlockMasks | None] = []
    for b in range(blocks):
        kw = {part: masks[part][b] for part in PARTS if residual or part in ("heads", "hidden")}
        out.append(BlockMasks(**kw))
    return out


def kept_ratio(masks: Mapping[str, torch.Tensor], shape: ViTShape, *, inputs: bool = True,
               residual: bool = True) -> torch.Tensor:
    """Eq. 2's Σ sum(M̂) / Σ size(M̂) over qkv, proj, fc1 and fc2 of the given blocks (differentiable).

    ``masks[part]`` is (blocks, units). ``inputs=True`` propagates pruned inputs (proj keeps
    |O_attn| x hd·|H| weights, fc2 |O_mlp| x |U|); ``inputs=False`` counts output rows only.
    """
    d, f, hd, nh = shape.embed_dim, shape.mlp_hidden, shape.head_dim, shape.num_heads
    heads = masks["heads"].sum(-1) * hd  # kept attention channels per block
    hidden = masks["hidden"].sum(-1)
    ones = torch.ones_like(heads)
    attn_out = masks["attn_out"].sum(-1) if residual else ones * d
    mlp_out = masks["mlp_out"].sum(-1) if residual else ones * d
    qkv = 3 * heads * d
    fc1 = hidden * d
    if inputs:
        proj, fc2 = attn_out * heads, mlp_out * hidden
    else:
        proj, fc2 = attn_out * nh * hd, mlp_out * f
    kept = (qkv + proj + fc1 + fc2).sum()
    size = heads.numel() * (3 * d * d + d * d + f * d + d * f)
    return kept / size


def _rank(probs: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """Indices from least to most important: by probability, ties by ``score`` (weight L1 norm)."""
    order = torch.argsort(score, stable=True)
    return order[torch.argsort(probs[order], stable=True)]


def binarize(probs: Mapping[str, torch.Tensor], shape: ViTShape, width: float, *,
             scores: Mapping[str, torch.Tensor] | None = None, fixed: Mapping[str, torch.Tensor] | None = None,
             inputs: bool = True, residual: bool = True, tol: float = 0.0) -> dict[str, torch.Tensor]:
    """Binary masks M = 1[P >= 0.5] projected onto the budget (spec §1.4 decision).

    If the kept ratio exceeds ``width + tol``, the least probable segments (ties: smallest ``scores``)
    are dropped globally until it fits; every block keeps at least its most probable head, hidden
    unit (and output row). ``fixed`` parts (random-mask ablation) are taken as given and never dropped.
    """
    blocks = probs["heads"].shape[0]
    scores = scores or {p: torch.zeros_like(probs[p]) for p in PARTS}
    fixed = dict(fixed or {})
    parts = [p for p in PARTS if residual or p in ("heads", "hidden")]
    m = {p: fixed[p].clone().float() if p in fixed else (probs[p] >= 0.5).float() for p in PARTS}
    if not residual:
        m["attn_out"] = torch.ones_like(probs["attn_out"])
        m["mlp_out"] = torch.ones_like(probs["mlp_out"])
    protected = {p: torch.zeros_like(probs[p], dtype=torch.bool) for p in PARTS}
    for p in parts:
        if p in fixed:
            continue
        best = torch.stack([_rank(probs[p][b], scores[p][b])[-1] for b in range(blocks)])
        protected[p][torch.arange(blocks), best] = True
        m[p][protected[p]] = 1.0
    if float(kept_ratio(m, shape, inputs=inputs, residual=residual)) <= width + tol:
        return m
    # candidates: kept, learned, unprotected segments, least important first (global order over parts)
    flat_p, flat_s, where = [], [], []  # where: (part number, block, unit) of each candidate
    for k, p in enumerate(parts):
        if p in fixed:
            continue
        keep = (m[p] > 0) & ~protected[p]
        idx = keep.nonzero()
        flat_p.append(probs[p][keep])
        flat_s.append(scores[p][keep] / (scores[p].abs().max() + 1e-12))
        where.append(torch.cat([torch.full((len(idx), 1), k, dtype=torch.long), idx], dim=1))
    candidates = torch.cat(where) if where else torch.zeros(0, 3, dtype=torch.long)
    if not len(candidates):
        return m
    order = _rank(torch.cat(flat_p), torch.cat(flat_s))
    part_of, block_of, unit_of = candidates.unbind(1)

    def dropped(n: int) -> dict[str, torch.Tensor]:
        """``m`` with the ``n`` least important candidates set to 0 (one indexed write per part, not per unit)."""
        out = {p: t.clone() for p, t in m.items()}
        first = order[:n]
        for k, p in enumerate(parts):
            mine = first[part_of[first] == k]
            if len(mine):
                out[p][block_of[mine], unit_of[mine]] = 0.0
        return out

    lo, hi = 0, len(order)  # smallest n whose ratio fits; the ratio falls as n grows
    while lo < hi:
        mid = (lo + hi) // 2
        if float(kept_ratio(dropped(mid), shape, inputs=inputs, residual=residual)) <= width + tol:
            hi = mid
        else:
            lo = mid + 1
    return dropped(lo)


def random_masks(shape: ViTShape, width: float, parts: tuple[str, ...], generator: torch.Generator
                 ) -> dict[str, torch.Tensor]:
    """Uniformly random structured masks at ``width`` for ``parts`` (Tab. 3's random-mask ablation)."""
    out = {}
    for p in parts:
        size = part_sizes(shape)[p]
        keep = max(1, round(width * size))
        m = torch.zeros(shape.depth, size)
        for b in range(shape.depth):
            m[b, torch.randperm(size, generator=generator)[:keep]] = 1.0
        out[p] = m
    return out


def kept_indices(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero().flatten())
