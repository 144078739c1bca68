"""Multi-exit self-distillation, Co-S2P Eq. 3: every exit learns the labels and the deepest exit.

    L = Σ_i [(1 - λ2) CE(ŷ_i, y) + λ2 KL(ŷ_i, ŷ_c)],  KL(ŷ_i, ŷ_c) = Σ σ(ŷ_i/t) ln(σ(ŷ_i/t) / σ(ŷ_c/t)) · t²

As written in the paper the KL runs student ‖ teacher (``direction="student_teacher"``); BYOT and
Hinton's KD use teacher ‖ student (``"teacher_student"``). The teacher's logits are detached; the
KL is summed over classes and averaged over the batch; the teacher's own term is its CE only.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fedcore.errors import ConfigError

DIRECTIONS = ("student_teacher", "teacher_student")


def kd_term(student: torch.Tensor, teacher: torch.Tensor, t: float, direction: str = "student_teacher"
            ) -> torch.Tensor:
    """t² · KL between the tempered softmaxes, summed over classes, mean over the batch."""
    if direction not in DIRECTIONS:
        raise ConfigError(f"kd_direction={direction!r} is not allowed; choose one of: {', '.join(DIRECTIONS)}")
    log_s, log_t = F.log_softmax(student / t, dim=-1), F.log_softmax(teacher / t, dim=-1)
    if direction == "student_teacher":
        kl = (log_s.exp() * (log_s - log_t)).sum(-1)
    else:
        kl = (log_t.exp() * (log_t - log_s)).sum(-1)
    return kl.mean() * t * t


def self_distillation_loss(exits: Sequence[torch.Tensor], labels: torch.Tensor, *, kd_weight: float,
                           temperature: float, direction: str = "student_teacher", detach_teacher: bool = True
                           ) -> torch.Tensor:
    """Eq. 3 over ``exits`` in depth order (the last is the teacher); ``kd_weight`` is λ2 (0 = plain CE)."""
    if not exits:
        raise ConfigError("self-distillation needs at least one exit")
    teacher = exits[-1].detach() if detach_teacher else exits[-1]
    loss = (1 - kd_weight) * F.cross_entropy(exits[-1], labels)
    for logits in exits[:-1]:
        loss = loss + (1 - kd_weight) * F.cross_entropy(logits, labels)
        if kd_weight:
            loss = loss + kd_weight * kd_term(logits, teacher, temperature, direction)
    return loss
