"""masked_weighted_delta: the element-wise merge of Eq. 5, FedRolex and HeteroFL (spec §6 test 7)."""
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore_pruning import SubmodelSpec, extract, fedrolex_spec, masked_delta, masked_weighted_delta, scatter
from fedcore_pruning.errors import SubmodelMismatchError

B = torch.tensor


def _two_clients():
    w = {"a": B([1.0, 2.0, 3.0, 4.0])}
    u1 = ({"a": B([0.1, 0.2, 0.0, 9.0])}, {"a": B([True, True, False, False])})
    u2 = ({"a": B([0.3, 7.0, 0.5, 9.0])}, {"a": B([True, False, True, False])})
    return w, [u1, u2]


def test_overlap_is_averaged_disjoint_takes_its_client_untouched_stays():
    w, updates = _two_clients()
    out = masked_weighted_delta(w, updates, rule="uniform")
    torch.testing.assert_close(out["a"], B([1.0 - 0.2, 2.0 - 0.2, 3.0 - 0.5, 4.0]))
    assert out["a"][3] == 4.0 and w["a"][0] == 1.0  # untouched element unchanged; input not modified


def test_sample_weights_and_server_step():
    w, updates = _two_clients()
    out = masked_weighted_delta(w, updates, [1.0, 3.0], rule="samples", server_lr=0.5)
    torch.testing.assert_close(out["a"], B([1.0 - 0.5 * (0.1 + 0.9) / 4, 2.0 - 0.1, 3.0 - 0.25, 4.0]))


def test_callable_rule_gets_per_element_weights_and_zero_weights_fall_back_to_uniform():
    w, updates = _two_clients()
    seen = {}

    def gamma(name, tensor, deltas, masks, weights):  # an Eq. 4-like weight: L1 of each client's kept delta
        seen[name] = (len(deltas), weights)
        return [d[m].abs().sum() for d, m in zip(deltas, masks)]

    out = masked_weighted_delta(w, updates, [5.0, 6.0], rule=gamma)
    g1, g2 = 0.3, 0.8
    torch.testing.assert_close(out["a"][0], B(1.0 - (g1 * 0.1 + g2 * 0.3) / (g1 + g2)))
    assert seen["a"] == (2, [5.0, 6.0])
    zero = masked_weighted_delta(w, updates, rule=lambda *a: [torch.zeros(4), torch.zeros(4)])
    torch.testing.assert_close(zero["a"], masked_weighted_delta(w, updates)["a"])


def test_fedrolex_round_end_to_end(full, shape):
    """Two FedRolex clients of width 0.5 in rounds 0 and 2: overlapping heads average, the rest keep their value."""
    global_state = full.state_dict()
    zeros = {k: torch.zeros_like(v) for k, v in global_state.items()}
    updates = []
    for r, step in ((0, 0.1), (1, 0.3)):
        spec = fedrolex_spec(shape, 0.5, round=r)
        sub = extract(full, spec)
        delta = {k: torch.full_like(v, step) for k, v in sub.state_dict().items()}
        updates.append(scatter(delta, spec, into=zeros))
    out = masked_weighted_delta(global_state, updates)
    diff = global_state["blocks.0.mlp.fc1.bias"] - out["blocks.0.mlp.fc1.bias"]
    torch.testing.assert_close(diff[0], B(0.1))  # hidden unit 0: client 0 only
    torch.testing.assert_close(diff[1:32], torch.full((31,), 0.2))  # units 1..31: both clients
    torch.testing.assert_close(diff[32], B(0.3))  # unit 32: client 1 only
    assert not diff[33:].any()  # nobody trained units 33..63
    head3 = [*range(24, 32), *range(56, 64), *range(88, 96)]  # q, k, v rows of head 3, which neither client held
    assert torch.equal(out["blocks.0.attn.qkv.weight"][head3], global_state["blocks.0.attn.qkv.weight"][head3])
    assert not torch.equal(out["blocks.0.attn.qkv.weight"][8:16], global_state["blocks.0.attn.qkv.weight"][8:16])


@pytest.mark.parametrize("break_it, error, message", [
    (lambda d, m: d.update(a=torch.zeros(3)), SubmodelMismatchError, r"delta \(3,\)"),
    (lambda d, m: m.update(a=torch.ones(4)), SubmodelMismatchError, "expected bool"),
    (lambda d, m: d.update(a=B([float("nan"), 0, 0, 0])), SubmodelMismatchError, "NaN"),
    (lambda d, m: (d.update(b=torch.zeros(4)), m.update(b=torch.ones(4, dtype=torch.bool))),
     SubmodelMismatchError, "tensor b is not in the global state"),
    (lambda d, m: (d.pop("a"), d.update(c=torch.zeros(4))), SubmodelMismatchError,
     "mask names tensors the delta lacks"),
])
def test_bad_updates_are_refused_and_nothing_is_merged(break_it, error, message):
    w, updates = _two_clients()
    break_it(*updates[1])
    with pytest.raises(error, match=message):
        masked_weighted_delta(w, updates)
    assert torch.equal(w["a"], B([1.0, 2.0, 3.0, 4.0]))


def test_bad_settings_are_refused():
    w, updates = _two_clients()
    with pytest.raises(ConfigError, match="rule='mean' is not allowed; choose one of: 'uniform', 'samples'"):
        masked_weighted_delta(w, updates, rule="mean")
    with pytest.raises(ConfigError, match="weights has 1 entries for 2 updates"):
        masked_weighted_delta(w, updates, [1.0], rule="samples")
    with pytest.raises(ConfigError, match="finite and >= 0"):
        masked_weighted_delta(w, updates, [1.0, -2.0], rule="samples")
    with pytest.raises(ConfigError, match="returned 1 weights for 2 updates"):
        masked_weighted_delta(w, updates, rule=lambda *a: [torch.ones(4)])


def test_a_trained_window_comes_back_exactly_and_the_frozen_prefix_does_not_dilute(full, shape, images):
    spec = SubmodelSpec.build(shape, window_start=1, window_length=2, heads=[[0, 1], [1, 2], [3]], exits=[3])
    sub = extract(full, spec).train()
    start = {k: v.clone() for k, v in sub.state_dict().items()}
    opt = torch.optim.SGD([p for p in sub.parameters() if p.requires_grad], lr=0.5)
    torch.nn.functional.cross_entropy(sub(images), torch.tensor([0, 1, 2])).backward()
    opt.step()
    delta, mask = masked_delta(start, sub.state_dict(), spec, full.state_dict())
    assert set(mask) == {k for k in full.state_dict() if k.startswith(("blocks.1.", "blocks.2."))}
    # a second client whose frozen prefix covers block 1: its prefix must not enter the merge of block 1
    other = SubmodelSpec.build(shape, window_start=2, window_length=1, exits=[3])
    unchanged = extract(full, other).state_dict()
    updates = [(delta, mask), masked_delta(unchanged, unchanged, other, full.state_dict())]
    merged = masked_weighted_delta(full.state_dict(), updates)
    block1 = [name for name in mask if name.startswith("blocks.1.")]
    for name in block1:
        torch.testing.assert_close(merged[name], full.state_dict()[name] - delta[name], atol=0, rtol=0)
    full.load_state_dict(merged)
    torch.testing.assert_close(extract(full, spec).blocks[1].attn.qkv.weight, sub.blocks[1].attn.qkv.weight,
                               atol=1e-6, rtol=0)
