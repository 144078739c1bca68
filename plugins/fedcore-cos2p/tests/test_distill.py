"""Spec 004 §6 test 5: Eq. 3 KL against a hand computation (t = 3, both directions); the teacher term is CE only."""
import math

import pytest
import torch
import torch.nn.functional as F

from fedcore.errors import ConfigError
from fedcore_cos2p import kd_term, self_distillation_loss


def softmax(v, t):
    e = [math.exp(x / t) for x in v]
    return [x / sum(e) for x in e]


def test_kl_matches_a_hand_computation_at_t_3_in_both_directions():
    s, t = [1.0, 2.0, 0.5], [0.2, 3.0, -1.0]
    ps, pt = softmax(s, 3.0), softmax(t, 3.0)
    student_teacher = 9 * sum(a * math.log(a / b) for a, b in zip(ps, pt))
    teacher_student = 9 * sum(b * math.log(b / a) for a, b in zip(ps, pt))
    st, tt = torch.tensor([s]), torch.tensor([t])
    assert float(kd_term(st, tt, 3.0, "student_teacher")) == pytest.approx(student_teacher, rel=1e-5)
    assert float(kd_term(st, tt, 3.0, "teacher_student")) == pytest.approx(teacher_student, rel=1e-5)
    assert student_teacher != pytest.approx(teacher_student)
    with pytest.raises(ConfigError, match="kd_direction='sideways'"):
        kd_term(st, tt, 3.0, "sideways")


def test_eq3_sums_ce_and_kl_over_exits_and_the_teacher_contributes_ce_only():
    torch.manual_seed(0)
    exits = [torch.randn(4, 5, requires_grad=True) for _ in range(3)]
    y = torch.tensor([0, 1, 2, 3])
    lam = 0.3
    loss = self_distillation_loss(exits, y, kd_weight=lam, temperature=3.0)
    expected = sum((1 - lam) * F.cross_entropy(e, y) for e in exits)
    expected = expected + sum(lam * kd_term(e, exits[-1].detach(), 3.0) for e in exits[:-1])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()  # the teacher is detached inside the KL: its gradient is its CE gradient only
    y1 = exits[-1].detach().clone().requires_grad_(True)
    ((1 - lam) * F.cross_entropy(y1, y)).backward()
    assert torch.allclose(exits[-1].grad, y1.grad)
    single = self_distillation_loss(exits[-1:], y, kd_weight=lam, temperature=3.0)
    assert float(single) == pytest.approx(float((1 - lam) * F.cross_entropy(exits[-1], y)))
