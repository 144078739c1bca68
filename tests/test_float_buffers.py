"""BatchNorm running statistics through delta-based aggregation: a convex mean of uploads, never a delta step."""
import pytest
import torch
from torch import nn

from fedcore.builtin import FedAsyncMix, FedBuffStep, convex_mean, float_buffer_names
from fedcore.types import ClientUpdate


def bn_model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))


def update(cid: int, var: float, base_var: float, weight: float, base_weight: float, staleness: int) -> ClientUpdate:
    tensors = {"0.weight": torch.full((2, 3), weight), "1.running_var": torch.full((2,), var),
               "1.num_batches_tracked": torch.tensor(5)}
    base = {"0.weight": torch.full((2, 3), base_weight), "1.running_var": torch.full((2,), base_var),
            "1.num_batches_tracked": torch.tensor(3)}
    return ClientUpdate(client_id=cid, tensors=tensors, base=base, num_examples=10, staleness=staleness)


def test_float_buffers_are_found_by_dtype_not_name():
    m = bn_model()
    assert float_buffer_names(m) == {"1.running_mean", "1.running_var"}  # num_batches_tracked is an integer


def test_fedbuff_keeps_running_var_in_the_range_clients_sent():
    model = bn_model()
    with torch.no_grad():
        model[1].running_var.fill_(0.2)  # the global statistics moved on since the stale clients started
        model[0].weight.fill_(1.0)
    # stale clients started from var 1.0 and measured 0.1: a delta step would give 0.2 - 0.9 < 0
    ups = [update(0, 0.1, 1.0, 2.0, 1.5, staleness=3), update(1, 0.3, 1.0, 1.0, 1.5, staleness=0)]
    out = FedBuffStep(server_lr=1.0).fedcore_aggregate(model=model, updates=ups, ctx=None).state
    var = out["1.running_var"]
    assert torch.all(var >= 0.1) and torch.all(var <= 0.3)
    s = [1 / (1 + 3) ** 0.5, 1.0]  # polynomial staleness weights, a = 0.5
    expected = (0.1 * s[0] + 0.3 * s[1]) / (s[0] + s[1])
    assert torch.allclose(var, torch.full((2,), expected))
    # parameters are still the FedBuff delta step on the current model: w + η · (1/K) Σ s_i Δ_i
    step = (s[0] * 0.5 + s[1] * -0.5) / 2
    assert torch.allclose(out["0.weight"], torch.full((2, 3), 1.0 + step))


def test_fedasync_mixing_is_convex_for_buffers_too():
    model = bn_model()
    with torch.no_grad():
        model[1].running_var.fill_(0.2)
    ups = [update(0, 0.1, 1.0, 2.0, 1.5, staleness=2)]
    var = FedAsyncMix(alpha=0.6).fedcore_aggregate(model=model, updates=ups, ctx=None).state["1.running_var"]
    assert torch.all((var >= 0.1) & (var <= 0.2))


def test_convex_mean_refuses_negative_weights():
    ups = [update(0, 0.1, 1.0, 2.0, 1.5, 0), update(1, 0.3, 1.0, 1.0, 1.5, 0)]
    with pytest.raises(ValueError, match="non-negative"):
        convex_mean(ups, [1.0, -0.5], {"1.running_var"})
