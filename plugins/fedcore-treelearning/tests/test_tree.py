"""The tree's numerics: concatenation at meeting points, the gradient split, snapshot (delayed) gradients, strips."""
import copy

import pytest
import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore.models import micro_cnn
from fedcore_treelearning.strips import check_tiling, deepest_tiling_split, strip_bounds
from fedcore_treelearning.tree import ClientPart, TreeServer, UnitRange, merged_forward, unit_entries


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3))


def test_horizontal_tree_equals_the_whole_model_on_the_concatenated_batch():
    """Clients at splits 2 and 4: the merged loss and every client's gradient equal the plain model's on the
    stacked batch (horizontal concatenation is along the batch; the gradient split is autograd's)."""
    model = mlp()
    xa, xb = torch.randn(5, 1, 4, 4), torch.randn(3, 1, 4, 4)
    ya, yb = torch.tensor([0, 1, 2, 0, 1]), torch.tensor([2, 2, 0])
    ha = UnitRange(model, 1, 1)(xa)
    hb = UnitRange(model, 1, 3)(xb)
    server = TreeServer(model, {0: 2, 1: 4}, mode="horizontal", lr=0.0001, momentum=0.0)
    labels = server.merged_labels({0: ya, 1: yb})
    grads = server.step({0: ha.detach(), 1: hb.detach()}, labels)
    # reference: the same weights, the whole batch through the plain model
    ref = copy.deepcopy(model)
    la = UnitRange(ref, 1, 1)(xa).detach().requires_grad_(True)
    lb = UnitRange(ref, 1, 3)(xb).detach().requires_grad_(True)
    logits = torch.cat([UnitRange(ref, 2, 6)(la), UnitRange(ref, 4, 6)(lb)])
    loss = nn.functional.cross_entropy(logits, torch.cat([ya, yb]))
    loss.backward()
    assert server.losses[0] == pytest.approx(loss.item(), rel=1e-6)
    assert torch.allclose(grads[0], la.grad, atol=1e-7) and torch.allclose(grads[1], lb.grad, atol=1e-7)
    assert grads[0].shape == ha.shape and grads[1].shape == hb.shape


def test_the_server_trains_only_units_from_the_first_meeting_point():
    model = mlp()
    server = TreeServer(model, {0: 4, 1: 5}, mode="horizontal", lr=0.5, momentum=0.0)
    before = {k: v.clone() for k, v in server.model.state_dict().items()}
    h = {0: UnitRange(model, 1, 3)(torch.randn(4, 1, 4, 4)).detach(),
         1: UnitRange(model, 1, 4)(torch.randn(4, 1, 4, 4)).detach()}
    server.step(h, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]))
    changed = {k for k, v in server.model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == set(unit_entries(server.model, 4, 6)) == {"3.weight", "3.bias", "5.weight", "5.bias"}


def test_vertical_tree_concatenates_strips_along_the_width():
    model = micro_cnn(num_classes=3, in_chans=1, width=4)
    x = torch.randn(2, 1, 8, 8)
    bounds = strip_bounds(8, [0, 1], [4, 4])
    units = [u for _, u in __import__("fedcore_treelearning").partition_units(model)]
    h0 = units[0](x[..., 0:4])
    h1 = units[1](units[0](x[..., 4:8]))
    with torch.no_grad():
        out = merged_forward(units, {0: 2, 1: 3}, {0: h0, 1: h1}, "vertical")
    assert out.shape == (2, 3)
    check_tiling(model, x, {0: 2, 1: 3}, bounds)  # no error: the merged map has the whole image's shape


def test_strips_that_do_not_tile_the_input_are_one_clear_error():
    with pytest.raises(ConfigError, match=r"vertical strips \[3, 4\] do not tile the input.*8"):
        strip_bounds(8, [0, 1], [3, 4])
    with pytest.raises(ConfigError, match="do not tile"):
        strip_bounds(8, [0, 1], [0, 8])
    model = micro_cnn(num_classes=3, in_chans=1, width=4)  # conv conv maxpool conv avgpool flatten linear
    x = torch.randn(2, 1, 8, 8)
    bounds = strip_bounds(8, [0, 1])
    assert deepest_tiling_split(model, x, bounds) == 5  # split 6 merges after the pooling took the width away
    with pytest.raises(ConfigError, match=r"do not tile the input at splits \{0: 6, 1: 6\}"):
        check_tiling(model, x, {0: 6, 1: 6}, bounds)


def test_a_delayed_gradient_is_the_gradient_at_the_snapshot_it_was_computed_at():
    """Pipelined TL: batch 1's gradient applied after the weights moved on equals backprop at the old weights."""
    model = mlp()
    part = ClientPart(model, 4, lr=0.1, momentum=0.0)
    x1, x2 = torch.randn(3, 1, 4, 4), torch.randn(3, 1, 4, 4)
    g = torch.randn(3, 12)
    ref = copy.deepcopy(model)
    h_ref = UnitRange(ref, 1, 3)(x1)
    expected = torch.autograd.grad(h_ref, [p for p in ref.parameters()][:2], g)
    h1, snap1 = part.forward(x1)
    h2, snap2 = part.forward(x2)
    part.apply(h2, snap2, torch.randn(3, 12))  # the weights move on (batch 2 first)
    w_before = model[1].weight.detach().clone()
    part.apply(h1, snap1, g)  # no version-counter error: h1's graph holds its own snapshot
    step = (w_before - model[1].weight.detach()) / 0.1
    assert torch.allclose(step, expected[0], atol=1e-6)


def test_a_split_outside_the_model_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"split 7 of client 1 is outside the model: with 6 units .* 2\.\.6"):
        TreeServer(mlp(), {0: 2, 1: 7}, mode="horizontal", lr=0.1, momentum=0.0)
    with pytest.raises(ConfigError, match="mode='diagonal'; choose one of: horizontal, vertical"):
        TreeServer(mlp(), {0: 2}, mode="diagonal", lr=0.1, momentum=0.0)
