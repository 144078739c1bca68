"""The clipping and noise arithmetic of DP-FedAvg equals a hand computation."""
import math

import attrs
import pytest
import torch

import fedcore
from fedcore import ClientUpdate
from fedcore.builtin import FedAvg, PerJobCohort, VectorisedCohort
from fedcore.rng import torch_generator
from fedcore.testing import build_engine, round_context, run_tiny_pipeline
from fedcore_dp import DPFedAvg, adaptive_noise_multiplier, clip, l2_norm, next_clip
from fedcore_dp.dp_fedavg import CLIP


def test_clip_by_hand():
    delta = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])}
    assert l2_norm(delta) == 5.0
    clipped, norm, scale = clip(delta, 1.0)
    assert (norm, scale) == (5.0, 0.2)
    assert clipped["a"].tolist() == pytest.approx([0.6, 0.0]) and clipped["b"].tolist() == pytest.approx([0.8])
    same, _, scale = clip(delta, 10.0)
    assert scale == 1.0 and same["a"].tolist() == [3.0, 0.0]


def test_adaptive_formulas_by_hand():
    assert adaptive_noise_multiplier(1.0, 1.0) == pytest.approx((1 - 1 / 4) ** -0.5)  # Andrew et al. Thm 1
    assert next_clip(1.0, 1.0, target_quantile=0.5, lr=0.2) == pytest.approx(math.exp(-0.1))
    assert next_clip(2.0, 0.0, target_quantile=0.5, lr=0.2) == pytest.approx(2 * math.exp(0.1))
    with pytest.raises(ValueError, match="bit_noise"):
        adaptive_noise_multiplier(1.0, 0.4)


def _updates(engine):
    model = engine.run_ctx.server.model
    base = {k: v.clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    keys = sorted(base)
    out = []
    for i, magnitude in enumerate((3.0, 0.1)):
        delta = {k: torch.zeros_like(v) for k, v in base.items()}
        delta[keys[0]].view(-1)[0] = magnitude           # client 0 moved 3.0 (clipped), client 1 moved 0.1 (not)
        out.append(ClientUpdate(client_id=i, num_examples=10 * (i + 1), tensors={k: base[k] + delta[k] for k in keys},
                                base=base, meta={"dp.clip": 1.0}))
    return base, keys, out


@pytest.mark.parametrize("same_client", [False, True], ids=["two-clients", "one-client-twice"])
def test_central_release_equals_hand_computation(same_client):
    dp = DPFedAvg(noise_multiplier=0.7, clip=1.0)
    engine = build_engine([dp, FedAvg(weighting="uniform")])
    base, keys, updates = _updates(engine)
    if same_client:  # one client answered twice in this aggregation (asynchronous restarts): its changes sum to 2C
        updates = [attrs.evolve(u, client_id=0) for u in updates]
    ctx = round_context(engine)
    out = engine.hooks.fedcore_aggregate(model=engine.run_ctx.server.model, updates=list(updates), ctx=ctx)
    # by hand: clipped changes 1.0 and 0.1 on one coordinate; noise 0.7 * sensitivity * N(0,1) in name order from
    # the server's ("dp-noise") stream, sensitivity C = 1 (2C when one client sent both); the mean over the 2
    # updates, added to the global model
    gen = torch_generator(ctx.seed, "round", 0, "client", None, "dp-noise")
    sensitivity = 2.0 if same_client else 1.0
    noise = {k: torch.randn(base[k].shape, generator=gen, dtype=torch.float64) * 0.7 * sensitivity
             for k in sorted(base)}
    for k in keys:
        change = torch.zeros_like(base[k], dtype=torch.float64)
        if k == keys[0]:
            change.view(-1)[0] = 1.0 + 0.1
        expected = (base[k].double() + (change + noise[k]) / 2).to(base[k].dtype)
        if k.endswith("running_var"):
            expected = expected.clamp_min(0)
        assert torch.allclose(out.state[k], expected, atol=1e-6), k
    assert out.metrics["dp_noise_multiplier"] == pytest.approx(0.7) and out.metrics["dp_clients"] == 2
    assert [u.client_id for u in updates] == ([0, 0] if same_client else [0, 1])  # the caller's list, as it was


def test_adaptive_clip_moves_by_the_noised_centred_count():
    dp = DPFedAvg(noise_multiplier=0.5, clip=1.0, clipping="adaptive", bit_noise=2.0, target_quantile=0.5,
                  clip_lr=0.2)
    engine = build_engine([dp, FedAvg(weighting="uniform")])
    _, _, updates = _updates(engine)
    updates = [attrs.evolve(u, meta={**u.meta, "dp.unclipped": float(i == 1)}) for i, u in enumerate(updates)]
    ctx = round_context(engine)
    out = engine.hooks.fedcore_aggregate(model=engine.run_ctx.server.model, updates=updates, ctx=ctx)
    draw = float(torch.randn((), generator=torch_generator(ctx.seed, "round", 0, "client", None, "dp-bit-noise"),
                             dtype=torch.float64))
    fraction = ((0 - 0.5) + (1 - 0.5) + 2.0 * draw) / 2 + 0.5
    assert out.metrics["dp_unclipped"] == pytest.approx(fraction)
    assert engine.run_ctx.server.stash[CLIP] == pytest.approx(math.exp(-0.2 * (fraction - 0.5)))
    z_update = adaptive_noise_multiplier(0.5, 2.0)  # the change's multiplier; with the count, the pair has z = 0.5
    assert out.metrics["dp_noise_multiplier"] == pytest.approx((z_update ** -2 + 4.0 ** -2) ** -0.5) \
        == pytest.approx(0.5)


class Received:
    """Records each update as the server receives it (after the clients' clipping)."""

    def __init__(self):
        self.norms = []

    @fedcore.hookimpl
    def fedcore_client_done(self, update):
        self.norms.append(math.sqrt(sum(float((update.tensors[k].double() - update.base[k].double()).pow(2).sum())
                                        for k in update.tensors)))


@attrs.frozen(eq=False, kw_only=True)
class Observe:
    """An observer component wrapping the recorder (components are frozen attrs classes)."""

    box: Received

    @fedcore.hookimpl
    def fedcore_client_done(self, update):
        self.box.fedcore_client_done(update)


@pytest.mark.parametrize("cohort", [PerJobCohort(), VectorisedCohort(on_cpu="vectorise")],
                         ids=["per-job", "vectorised"])
def test_every_client_is_clipped_on_the_client_under_every_cohort(cohort):
    box = Received()
    result = run_tiny_pipeline([Observe(box=box), DPFedAvg(noise_multiplier=0.0, clip=0.05), cohort,
                                FedAvg(weighting="uniform")], rounds=2)
    assert len(box.norms) == 6 and max(box.norms) <= 0.05 + 1e-5
    assert min(box.norms) > 0.05 - 1e-4  # each moved further than 0.05 and was scaled back to it
    assert result.history.last("test_accuracy") is not None


def test_per_job_and_vectorised_cohorts_give_the_same_private_run():
    runs = [run_tiny_pipeline([DPFedAvg(noise_multiplier=0.5, clip=0.1), c, FedAvg(weighting="uniform")], rounds=2)
            for c in (PerJobCohort(), VectorisedCohort(on_cpu="vectorise"))]
    a, b = (r.model.state_dict() for r in runs)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    assert runs[0].history.column("dp_epsilon") == runs[1].history.column("dp_epsilon")


@attrs.frozen(eq=False, kw_only=True)
class Changes:
    """Keeps each received update's change as one float64 vector, per round."""

    seen: list

    @fedcore.hookimpl
    def fedcore_client_done(self, update):
        self.seen.append(torch.cat([(update.tensors[k].double() - update.base[k].double()).flatten()
                                    for k in sorted(update.tensors)]))


def test_distributed_noise_each_client_adds_its_own_share_of_the_variance():
    # z = 2, C = 0.01, m = 3: each client adds N(0, (zC)²/m) per entry, so that the sum of 3 carries N(0, (zC)²);
    # the clipped change itself is at most C in norm over ~2,200 entries, negligible next to the noise
    seen = []
    dp = DPFedAvg(noise="distributed", clients_per_round=3, noise_multiplier=2.0, clip=0.01)
    result = run_tiny_pipeline([Changes(seen=seen), dp, FedAvg(weighting="uniform")], rounds=1)
    assert len(seen) == 3
    expected = 2.0 * 0.01 / math.sqrt(3)
    for change in seen:
        assert float(change.std()) == pytest.approx(expected, rel=0.05)
    corr = torch.corrcoef(torch.stack(seen))
    assert float((corr - torch.eye(3, dtype=corr.dtype)).abs().max()) < 0.1  # independent draws, not one stream
    assert result.history.last("agg_dp_noise_multiplier") == pytest.approx(2.0)   # the shares add up to z
