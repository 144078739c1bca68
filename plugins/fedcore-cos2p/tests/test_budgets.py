"""Spec 004 §6 test 10 (exit offsets, k_n and widths of Tab. 7) and the budget errors."""
import pytest

from fedcore.errors import ConfigError
from fedcore_cos2p import ClientBudget, split_budget
from fedcore_pruning import ViTShape

E3 = {"NX8": 0.015625, "NX16": 0.0625, "AGX32": 0.25, "AGX64": 0.5625}


def vit(depth, heads=8):
    return ViTShape(img_size=16, patch_size=4, embed_dim=64, depth=depth, num_heads=heads, mlp_hidden=256)


@pytest.mark.parametrize("depth,budgets,expected", [
    (8, {"NX8": 0.0625, "AGX32": 0.5625, "AGX64": 0.5625}, {"NX8": (2, 0.25), "AGX32": (6, 0.75), "AGX64": (6, 0.75)}),
    (12, {"NX8": 0.0625, "AGX64": 0.5625}, {"NX8": (3, 0.25), "AGX64": (9, 0.75)}),
    (16, E3, {"NX8": (2, 0.125), "NX16": (4, 0.25), "AGX32": (8, 0.5), "AGX64": (12, 0.75)}),
], ids=["E1", "E2", "E3"])
def test_window_and_width_match_the_spec_table(depth, budgets, expected):
    for device, (k, width) in expected.items():
        plan = ClientBudget.plan(vit(depth), budgets[device], population=list(budgets.values()))
        assert (plan.window, plan.width) == (k, pytest.approx(width))
        assert plan.width * plan.depth_rate == pytest.approx(budgets[device])


def test_e3_exit_offsets_are_2_4_8_12_and_each_client_gets_those_no_deeper_than_itself():
    population = list(E3.values())
    offsets = {d: ClientBudget.plan(vit(16), r, population=population).offsets for d, r in E3.items()}
    assert offsets == {"NX8": (2,), "NX16": (2, 4), "AGX32": (2, 4, 8), "AGX64": (2, 4, 8, 12)}


def test_ratio_moves_budget_between_width_and_depth_and_clips_depth_at_one():
    assert split_budget(0.25, 1.0) == pytest.approx((0.5, 0.5))
    assert split_budget(0.25, 4.0) == pytest.approx((1.0, 0.25))
    width, depth = split_budget(0.5625, 0.5)  # R^d = 1.06 > 1: clipped, the rest goes into width (spec §7.19)
    assert depth == 1.0 and width == pytest.approx(0.5625)


@pytest.mark.parametrize("budget", [0, -0.1, 1.5, "half", True])
def test_a_budget_outside_0_1_is_one_error_naming_the_field(budget):
    with pytest.raises(ConfigError, match=r"budgets\['x'\].*\(0, 1\]"):
        ClientBudget.plan(vit(8), budget, field="budgets['x']")


def test_a_width_that_leaves_no_head_is_an_error():
    with pytest.raises(ConfigError, match="keeps no head of the 4"):
        ClientBudget.plan(vit(8, heads=4), 0.015625)  # R^w = 0.125 < 1/4


def test_r7_ratio_one_half_keeps_no_head_of_the_micro_vit_on_the_nx8():
    """The README's R7 note: at R = 0.0625 and R^w/R^d = 0.5, R^w = 0.177 keeps no head of 4 (refused, one line
    naming the budget and the ratio) but one head of 8 (the paper's ViT-Tiny*)."""
    with pytest.raises(ConfigError, match=r"R\^w=0\.1768.*ratio=0\.5"):
        ClientBudget.plan(ViTShape(depth=8, num_heads=4), 0.0625, ratio=0.5)
    plan = ClientBudget.plan(ViTShape(depth=8, num_heads=8), 0.0625, ratio=0.5)
    assert plan.width == pytest.approx(0.0625 / (0.0625 / 0.5) ** 0.5) and plan.width * 8 >= 1
