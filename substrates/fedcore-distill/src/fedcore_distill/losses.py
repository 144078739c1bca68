"""Knowledge-distillation losses: soft KD (teacher || student, optional T^2) and the DeiT two-head hard loss.

FedGKT and FedVKD train the edge with ``CE + beta * T^2 * KL(p_T(teacher) || p_T(student))`` (Eq. 14 of
FedVKD with FedML's T^2 factor); the FedVKD server trains its class head on the label and its distillation
head on the edge model's hard decision (Eq. 13, DeiT's hard distillation).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_kd(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 3.0, *, t2_scale: bool = True
            ) -> torch.Tensor:
    """``KL(softmax(teacher/T) || softmax(student/T))`` averaged over the batch, times ``T^2`` if ``t2_scale``.

    The teacher is detached: gradients reach only the student.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    log_student = F.log_softmax(student / temperature, dim=-1)
    target = F.softmax(teacher.detach() / temperature, dim=-1)
    kl = F.kl_div(log_student, target, reduction="batchmean")
    return kl * temperature**2 if t2_scale else kl


def edge_kd_loss(student: torch.Tensor, labels: torch.Tensor, teacher: torch.Tensor, has_teacher: torch.Tensor, *,
                 form: str = "eq14", beta: float = 1.0, kd_lambda: float = 0.5, temperature: float = 3.0,
                 t2_scale: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The edge loss and its KD term (``None`` where no sample of the batch has server logits: round 0, CE only).

    ``form="eq14"`` (FedVKD Eq. 14/17): ``CE + beta * KD``; ``form="eq6"`` (the generic KD of Sec. 2.2, Eq. 6):
    ``(1 - kd_lambda) * CE + kd_lambda * KD``. ``KD`` is :func:`soft_kd` (``T^2`` if ``t2_scale``) over the samples
    that have server logits, weighted by their share of the batch.
    """
    ce = F.cross_entropy(student, labels)
    weight = beta if form == "eq14" else kd_lambda
    if not weight or not bool(has_teacher.any()):
        return ce, None
    kd = soft_kd(student[has_teacher], teacher[has_teacher], temperature, t2_scale=t2_scale)
    share = float(has_teacher.sum()) / len(has_teacher)
    if form == "eq14":
        return ce + beta * kd * share, kd
    return (1.0 - kd_lambda) * ce + kd_lambda * kd * share, kd


EDGE_KD_FORMS = ("eq14", "eq6")
"""Spec 002 A2: FedVKD's Eq. 14 (``CE + beta KD``) or the generic Eq. 6 (``(1 - lambda) CE + lambda KD``)."""


def hard_distill_targets(teacher_logits: torch.Tensor) -> torch.Tensor:
    """The teacher's hard decision ``argmax_c z[c]`` (Eq. 16): the distillation head's label."""
    return teacher_logits.argmax(dim=-1)


def two_head_loss(cls_logits: torch.Tensor, dist_logits: torch.Tensor, labels: torch.Tensor,
                  teacher_logits: torch.Tensor, *, w_ce: float = 1.0, w_dist: float = 1.0) -> torch.Tensor:
    """``w_ce * CE(cls, y) + w_dist * CE(dist, argmax teacher)`` (FedVKD Eq. 13; DeiT Eq. 7 uses 1/2, 1/2)."""
    loss = w_ce * F.cross_entropy(cls_logits, labels)
    if w_dist:
        loss = loss + w_dist * F.cross_entropy(dist_logits, hard_distill_targets(teacher_logits))
    return loss


__all__ = ["EDGE_KD_FORMS", "edge_kd_loss", "hard_distill_targets", "soft_kd", "two_head_loss"]
