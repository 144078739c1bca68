"""Cost model and simulated clock: FLOPs against an analytic count, caching, memory refusal, time arithmetic."""
import pytest
import torch

from fedcore.builtin import SGDUpdate
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.runtime import DeviceProfile, ResourceError, SimClock, count_samples, measure
from fedcore.runtime.clock import optimizer_slots_of
from fedcore.testing import run_tiny_pipeline, tiny_model
from fedcore.types import Share


def vit_forward_flops(T=17, D=64, depth=4, hidden=128, patches=16, patch_in=4, classes=10):
    """2·MACs of timm's ViT per sample: patch conv, per block qkv/attention/proj/mlp, head on the CLS token."""
    block = 2 * T * D * 3 * D + 2 * (2 * T * T * D) + 2 * T * D * D + 2 * 2 * T * D * hidden
    return (2 * patches * patch_in * D + depth * block + 2 * D * classes, depth * 2 * (2 * T * T * D),
            2 * patches * patch_in * D)


def test_micro_vit_flops_match_the_analytic_count():
    total, attention, patch = vit_forward_flops()
    cost = measure(micro_vit(), torch.randn(2, 1, 8, 8))
    assert cost.forward_flops == total
    # backward: 2x forward for every matmul, except the first layer (no input gradient), and fused attention
    # recomputes its scores (one extra QK^T of the two forward matmuls), i.e. 2.5x forward attention
    assert cost.train_flops == 3 * total - patch + attention // 2
    assert cost.param_bytes == sum(p.numel() * 4 for p in micro_vit().parameters())


def test_frozen_parameters_get_no_backward_cost_and_no_gradients():
    model = micro_vit()
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith("head")
    cost = measure(model, torch.randn(2, 1, 8, 8))
    full = measure(micro_vit(), torch.randn(2, 1, 8, 8))
    assert cost.forward_flops == full.forward_flops
    assert cost.train_flops == cost.forward_flops + 2 * 64 * 10  # only the head's weight gradient
    assert cost.trainable_bytes == (64 * 10 + 10) * 4
    assert cost.activation_bytes < full.activation_bytes / 10


def wide_vit():
    """A micro ViT over ``META_FROM`` parameters, so ``measure`` counts it on the meta device (wide and shallow:
    two blocks of width 256 are as many parameters as eight of 128, at a quarter of the kernel calls)."""
    return micro_vit(embed_dim=256, depth=2, num_heads=4)


class Gated(torch.nn.Module):
    """A forward that branches on its input's values: the meta device cannot run it."""

    def __init__(self):
        super().__init__()
        self.net = wide_vit()

    def forward(self, x):
        return self.net(x) if bool(x.sum() > -1e9) else self.net(-x)


@pytest.mark.parametrize("make", [wide_vit, Gated], ids=["on-meta", "data-dependent"])
def test_a_large_cpu_share_counts_what_its_real_tensors_count(make):
    """Over ``META_FROM`` parameters a CPU share is measured on a meta copy (the forward sees meta inputs, the
    weights are not touched); the counts equal the real tensors'. A forward that needs values falls back to them."""
    from fedcore.runtime.cost_model import META_FROM, _measure

    model, x = make(), torch.randn(2, 1, 8, 8)
    assert sum(p.numel() for p in model.parameters()) >= META_FROM
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0].device.type))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cost = measure(model, x)
    assert seen[0] == "meta" and seen[-1] == ("meta" if make is wide_vit else "cpu")  # tried on meta first
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    seen.clear()
    assert cost == _measure(model, x) and seen == ["cpu"] * len(seen) and seen


def test_meter_counts_train_and_eval_samples():
    model = torch.nn.Linear(3, 2)
    with count_samples(model) as work:
        model(torch.zeros(5, 3)).sum().backward()
        with torch.no_grad():
            model(torch.zeros(7, 3))
    assert work == {"train_samples": 5, "eval_samples": 7, "max_batch": 7, "forward_calls": 2}
    assert not model._forward_pre_hooks  # removed: the module stays picklable


def profile(name="dev", gflops=1.0, up=1e6, down=2e6, memory=2**30, **kw):
    return DeviceProfile(name=name, flops=gflops * 1e9, up_bps=up, down_bps=down, memory_bytes=memory, **kw)


def test_duration_is_flops_over_speed_plus_bytes_over_bandwidth():
    clock = SimClock({"dev": profile()})
    result = run_tiny_pipeline([SGDUpdate(epochs=2, batch_size=8)], rounds=1, num_clients=1, clock=clock,
                               profiles=["dev"])
    row = result.history[0]
    cost = next(iter(clock.model.cache.values()))
    samples = 96 * 2  # the one client holds all 96 samples, two epochs
    compute = samples * cost.train_flops / 1e9
    comm = 8 * row["bytes_down"] / 2e6 + 8 * row["bytes_up"] / 1e6
    assert row["virtual_compute_s"] == pytest.approx(compute)
    assert row["virtual_comm_s"] == pytest.approx(comm)
    assert row["virtual_time"] == pytest.approx(compute + comm)
    assert row["virtual_flops"] == samples * cost.train_flops


def test_halving_speed_doubles_compute_time_only():
    rows = []
    for speed in (1.0, 0.5):
        clock = SimClock({"dev": profile().scaled(speed=speed)})
        rows.append(run_tiny_pipeline([], rounds=2, clock=clock, profiles=["dev"] * 3).history[-1])
    fast, slow = rows
    assert slow["virtual_compute_s"] == pytest.approx(2 * fast["virtual_compute_s"])
    assert slow["virtual_comm_s"] == pytest.approx(fast["virtual_comm_s"])


def test_cost_is_measured_once_per_share_shape():
    clock = SimClock(default_profile="phone")
    run_tiny_pipeline([], rounds=3, num_clients=3, clock=clock)
    assert clock.model.measurements == 1
    model = tiny_model()
    model[1].weight.requires_grad = False
    clock.cost(clock._run.clients[0], Share(module=model, download=(), upload=()))
    assert clock.model.measurements == 2  # a different trainable set is a different shape


def test_memory_model_and_refusal_before_any_work():
    tiny = profile(name="tiny", memory=20_000)
    seen = []
    with pytest.raises(ResourceError) as info:
        run_tiny_pipeline([SGDUpdate(optimizer="adam", lr=0.01)], rounds=2, clock=SimClock({"tiny": tiny}),
                          profiles=["tiny"] * 3, on_round=seen.append)
    message = str(info.value)
    assert seen == []
    assert "client 0" in message and "'tiny'" in message and "optimizer" in message and "2 optimizer slots" in message
    clock = SimClock({"big": profile(name="big")})
    run_tiny_pipeline([SGDUpdate(momentum=0.9, batch_size=16)], rounds=1, clock=clock, profiles=["big"] * 3)
    parts = clock.memory_needed(clock._run.clients[0], _share())
    params = sum(p.numel() * 4 for p in tiny_model().parameters())
    assert parts["params"] == params and parts["grads"] == params  # tiny MLP: every parameter trains
    assert parts["optimizer"] == params  # SGD with momentum: one state tensor per parameter
    cost = next(iter(clock.model.cache.values()))
    assert parts["activations"] == cost.activations(16) > 0  # batch 16 read from the local update
    assert optimizer_slots_of(SGDUpdate()) == 0 and optimizer_slots_of(SGDUpdate(optimizer="adam")) == 2


def _share():
    module = tiny_model()
    return Share(module=module, download=tuple(module.state_dict()), upload=tuple(module.state_dict()))


def test_jitter_is_seeded_per_round_and_client():
    clock = lambda: SimClock({"dev": profile(jitter=0.5)})  # noqa: E731
    a = run_tiny_pipeline([], rounds=2, clock=clock(), profiles=["dev"] * 3).history.column("virtual_time")
    b = run_tiny_pipeline([], rounds=2, clock=clock(), profiles=["dev"] * 3).history.column("virtual_time")
    plain = run_tiny_pipeline([], rounds=2, clock=SimClock({"dev": profile()}), profiles=["dev"] * 3)
    assert a == b and a != plain.history.column("virtual_time")


def test_utilisation_and_ru_equal_one_for_identical_clients_and_lower_for_mixed():
    same = run_tiny_pipeline([], rounds=2, clock=SimClock({"dev": profile()}), profiles=["dev"] * 3).history[-1]
    assert same["ru"] == pytest.approx(1.0) and same["utilisation"] == pytest.approx(1.0)
    table = {"dev": profile(), "slow": profile(name="slow").scaled(speed=0.01, bandwidth=0.1)}
    mixed = run_tiny_pipeline([], rounds=2, clock=SimClock(table), profiles=["dev", "dev", "slow"]).history[-1]
    assert mixed["ru"] < 0.6 and mixed["client_utilisation"][2] == pytest.approx(1.0)
    assert mixed["client_utilisation"][0] < 0.2


def test_clock_settings_are_checked():
    with pytest.raises(ConfigError, match="efficiency"):
        SimClock(efficiency=0)
    with pytest.raises(ConfigError, match="batch_size"):
        SimClock(batch_size=0)
    with pytest.raises(ConfigError, match="DeviceProfile"):
        SimClock({"x": {"gflops": 1}})
