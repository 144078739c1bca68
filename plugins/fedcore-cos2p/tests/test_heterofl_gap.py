"""repro/heterofl_gap.py's controls: silencing the heads and MLP units outside a submodel evaluates exactly that
submodel (what its "last round's submodel only" column claims), and the update counts follow the share's rules."""
import importlib.util
from pathlib import Path

import pytest
import torch

from fedcore_pruning import PrunableViT, ViTShape, extract, prefix_indices, rolling_indices, width_spec

REPRO = Path(__file__).resolve().parents[1] / "repro"
SHAPE = ViTShape(img_size=8, patch_size=2, embed_dim=16, depth=2, num_heads=4, mlp_hidden=32, num_classes=5)
MODEL = {"embed_dim": 16, "depth": 2, "num_heads": 4, "mlp_ratio": 2.0}


@pytest.fixture
def gap(monkeypatch):
    monkeypatch.syspath_prepend(str(REPRO))  # the script imports its sibling tables.py, as when run from repro/
    spec = importlib.util.spec_from_file_location("heterofl_gap", REPRO / "heterofl_gap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rule", [prefix_indices, rolling_indices])
def test_silencing_the_outside_channels_is_the_submodels_forward(gap, rule):
    torch.manual_seed(0)
    model = PrunableViT(SHAPE)
    with torch.no_grad():  # weights of order 1, so a channel left on changes the output visibly
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    state = model.state_dict()
    heads, units = set(rule(4, 2, 3)), set(rule(32, 16, 3))
    sub = extract(state, width_spec(SHAPE, 0.5, rule, 3))
    x = torch.randn(6, 3, 8, 8)
    model.eval()
    sub.eval()
    with torch.no_grad():
        expected = sub(x)
        whole = model(x)
        model.load_state_dict(gap.silenced(state, heads, units, MODEL))
        got = model(x)
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(whole, expected, atol=1e-2)  # the control is not vacuous: the full model differs


def test_update_counts_spread_the_same_head_updates_differently(gap):
    model = {"embed_dim": 64, "depth": 8, "num_heads": 8, "mlp_ratio": 4.0}
    budgets = [0.0625] + [0.5625] * 7  # E1: the NX8 keeps 1 head and 16 units, an AGX 5 heads and 144 units
    prefix_heads, prefix_units = gap.update_counts("heterofl", model, budgets, 8)
    rolling_heads, rolling_units = gap.update_counts("fedrolex", model, budgets, 8)
    assert prefix_heads == [8 + 7 * 8] + [7 * 8] * 4 + [0] * 3
    assert rolling_heads == [36] * 8  # each head in 5 of 8 windows of 7 clients, plus one NX8 round
    assert sum(prefix_heads) == sum(rolling_heads) and sum(prefix_units) == sum(rolling_units)
    assert prefix_units[144:] == [0] * 112 and rolling_units[151:] == [0] * 105  # the unit window moved 7 of 256
