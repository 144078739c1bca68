"""Parameter, FLOP and training-memory counters, checked against hand formulas and the real optimizer."""
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore_pruning import (
    OPTIMIZER_STATES,
    SubmodelSpec,
    activation_bytes,
    count_flops,
    count_parameters,
    extract,
    training_memory,
)


def _block_params(d, heads, hd, hidden, attn_out, mlp_out):
    a = heads * hd
    return 4 * d + 3 * a * (d + 1) + attn_out * (a + 1) + hidden * (d + 1) + mlp_out * (hidden + 1)


def _block_flops(batch, t, d, heads, hd, hidden, attn_out, mlp_out):
    a = heads * hd
    linears = d * 3 * a + a * attn_out + d * hidden + hidden * mlp_out
    return 2 * batch * t * linears + 2 * 2 * batch * heads * t * t * hd


def _spec(shape):
    return SubmodelSpec.build(shape, window_start=1, window_length=2, heads=[[0], [1, 2], [3]],
                              hidden=[[0, 1], list(range(20)), list(range(8))], attn_out=[None, None, [0, 1]],
                              classes=[0, 1, 2], exits=[2, 3])


def test_parameter_counts_match_the_formula(full, shape):
    sub = extract(full, _spec(shape))
    counts = count_parameters(sub)
    d, hd = shape.embed_dim, shape.head_dim
    embed = d * (shape.in_chans * shape.patch_size ** 2 + 1) + d + shape.num_tokens * d
    exit_params = 2 * d + 3 * (d + 1)
    assert counts.frozen == embed + _block_params(d, 1, hd, 2, d, d)
    assert counts.trainable == _block_params(d, 2, hd, 20, d, d) + _block_params(d, 1, hd, 8, 2, d) + 2 * exit_params
    assert counts.total == sum(p.numel() for p in sub.parameters())


def test_flops_match_the_formula_and_the_prefix_costs_no_backward(full, shape):
    sub = extract(full, _spec(shape))
    batch, t, d, hd = 2, shape.num_tokens, shape.embed_dim, shape.head_dim
    flops = count_flops(sub, batch=batch)
    patch = 2 * batch * (t - 1) * d * shape.in_chans * shape.patch_size ** 2
    prefix = patch + _block_flops(batch, t, d, 1, hd, 2, d, d)
    window = _block_flops(batch, t, d, 2, hd, 20, d, d) + _block_flops(batch, t, d, 1, hd, 8, 2, d)
    exits = 2 * (2 * batch * d * 3)
    assert flops.forward == prefix + window + exits
    assert flops.backward == 2 * (window + exits)  # gradients of inputs and weights, window and exits only
    assert flops.per_sample == (flops.forward + flops.backward) / batch
    assert all(p.grad is None for p in sub.parameters())  # counting leaves no gradients behind


def test_adan_state_count_matches_timm(full, shape, images):
    from timm.optim import Adan  # imported here: light at collection (docs/testing.md)

    sub = extract(full, _spec(shape)).train()
    opt = Adan([p for p in sub.parameters() if p.requires_grad], lr=1e-3)
    sum(o.sum() for o in sub.forward_all(images)).backward()
    opt.step()
    state_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                      if torch.is_tensor(t) and t.dim() > 0)
    assert OPTIMIZER_STATES["adan"] == 4  # exp_avg, exp_avg_sq, exp_avg_diff and neg_pre_grad
    assert training_memory(sub, batch=2, optimizer="adan").optimizer == state_bytes


def test_memory_parts(full, shape):
    sub = extract(full, _spec(shape))
    mem = training_memory(sub, batch=2, optimizer="adan")
    counts = count_parameters(sub)
    assert mem.weights == 4 * counts.total and mem.gradients == 4 * counts.trainable
    assert mem.total == mem.weights + mem.gradients + mem.optimizer + mem.activations
    assert training_memory(sub, batch=2, optimizer="sgd").optimizer == 0


def test_activations_come_from_the_trainable_window_only(full, shape):
    # the same window and widths behind a frozen prefix of 1 or 2 blocks: the prefix saves nothing for backward
    one = SubmodelSpec.build(shape, window_start=1, window_length=1, exits=[2])
    two = SubmodelSpec.build(shape, window_start=2, window_length=1, exits=[3])
    a, b = activation_bytes(extract(full, one), 4), activation_bytes(extract(full, two), 4)
    assert a == b > 0
    wider = SubmodelSpec.build(shape, window_start=1, window_length=2, exits=[3])
    assert activation_bytes(extract(full, wider), 4) > a
    sub = extract(full, one)
    assert activation_bytes(sub, 4) == 2 * activation_bytes(sub, 2)


def test_pruning_shrinks_every_cost(full, shape):
    small = SubmodelSpec.build(shape, heads=[[0, 1]] * 4, hidden=[list(range(32))] * 4)
    big, little = extract(full, SubmodelSpec.full(shape)), extract(full, small)
    assert count_parameters(little).total < count_parameters(big).total
    assert count_flops(little).per_sample < count_flops(big).per_sample
    assert training_memory(little, 2).total < training_memory(big, 2).total


def test_bad_counter_inputs(full, shape):
    sub = extract(full, SubmodelSpec.full(shape))
    with pytest.raises(ConfigError,
                       match="optimizer='adam' is not allowed; choose one of: sgd, sgd_momentum, adamw, adan"):
        training_memory(sub, 2, optimizer="adam")
    with pytest.raises(ConfigError, match="batch=0"):
        count_flops(sub, batch=0)
