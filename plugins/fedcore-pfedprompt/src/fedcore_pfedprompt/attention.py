"""pFedPrompt's Local Feature Attention (thesis §5.3.2, Eq. 5.3-5.7), non-parametric and client-local.

Memory ``M = (M_k, M_v)`` from the client's own few-shot support set: keys are the L2-normalised image
features (``buffer="full"``, ``N·K_c x C``) or per-class prototypes (``"prototype"``, ``K_c x C``: mean of
the normalised keys, re-normalised; spec 003b A13); values are one-hot labels in the global label space.
``A = cos(q, M_k)`` (Eq. 5.5; ``affinity="tip"`` = Tip-Adapter's ``exp(-β(1-cos))`` is an extension, not
in the thesis), ``F_pers = A·M_v`` (5.6), ``logits = exp(t)·q·F_tᵀ + α·F_pers`` (5.7). ``kind="prior"`` is
the ablation of spec 003b E4: the bonus is ``1[class is local]`` only, with no visual features.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

BUFFERS = ("full", "prototype")
AFFINITIES = ("cos", "tip")
KINDS = ("attention", "prior")


def build_memory(keys: torch.Tensor, labels: torch.Tensor, num_classes: int, buffer: str = "full"
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(M_k, M_v)`` from normalised support features ``keys [n, C]`` and their ``labels [n]``."""
    if buffer == "prototype":
        classes = torch.unique(labels)
        protos = torch.stack([keys[labels == c].mean(0) for c in classes])
        return F.normalize(protos, dim=-1), F.one_hot(classes, num_classes).float()
    return keys, F.one_hot(labels, num_classes).float()


def personal_logits(query: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], *, kind: str = "attention",
                    affinity: str = "cos", beta: float = 5.5) -> torch.Tensor:
    """``F_pers = A·M_v`` for normalised queries ``[B, C]`` (Eq. 5.5-5.6), or the label-prior ablation."""
    m_k, m_v = memory
    if kind == "prior":
        return (m_v.sum(0) > 0).float().expand(len(query), -1)
    a = query @ m_k.t()
    if affinity == "tip":
        a = torch.exp(-beta * (1 - a))
    return a @ m_v
