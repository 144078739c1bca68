"""Costs: forward multiply-accumulates from torch's FLOP counter, bytes per message kind from the ledger.

MACs are counted on the meta device (no memory, no arithmetic), so paper-size models (ViT-B, ResNet-109) cost
nothing to measure. Attention is counted with timm's unfused path, so the ``2 n^2 c`` attention products of
``L(12 n c^2 + 2 n^2 c)`` are included.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import copy
import sys
from typing import Any

import torch
from torch import nn


def forward_macs(module: nn.Module, input_shape: Sequence[int]) -> int:
    """MACs of one forward pass on one sample of ``input_shape`` (counted on a meta-device copy)."""
    from torch.utils.flop_counter import FlopCounterMode

    meta = copy.deepcopy(module).to("meta").eval()
    vit = sys.modules.get("timm.models.vision_transformer")  # not imported: the module holds no timm Attention
    for m in meta.modules():
        if vit is not None and isinstance(m, vit.Attention):
            m.fused_attn = False  # type: ignore[misc]  # count q@k^T and attn@v explicitly (Final in timm)
    x = torch.zeros(1, *input_shape, device="meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        meta(x)
    return int(counter.get_total_flops() // 2)


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def train_macs(forward: int, samples: int, epochs: int = 1) -> int:
    """MACs of training: forward + backward ~ 3 forwards per sample and epoch (the usual estimate)."""
    return 3 * forward * samples * epochs


def bytes_by_kind(rows: Iterable[Mapping[str, Any]], *, round: int | None = None) -> dict[str, dict[str, int]]:
    """``{direction: {kind: bytes}}`` from ledger rows (``Ledger.to_rows()``), for one round or all."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        if round is not None and row["round"] != round:
            continue
        by_kind = out.setdefault(row["direction"], {})
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + int(row["nbytes"])
    return out


__all__ = ["bytes_by_kind", "forward_macs", "num_params", "train_macs"]
