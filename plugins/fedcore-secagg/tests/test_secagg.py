"""The secagg component in runs: the unmasked mean, the ledger's bytes, the clock's seconds, refusals, cohorts."""
import attrs
import pytest
import torch

import fedcore
from fedcore import ConfigError
from fedcore.builtin import (
    AsyncSchedule,
    BufferedSchedule,
    FedAvg,
    FedBuffStep,
    PerJobCohort,
    VectorisedCohort,
    WholeModel,
)
from fedcore.runtime import SimClock, presets
from fedcore.testing import run_tiny_pipeline
from fedcore_secagg import SecAggPlus
from fedcore_secagg.field import step_size


def max_gap(a, b):
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa if sa[k].is_floating_point())


def test_the_unmasked_mean_is_fedavgs_to_the_quantisation_step():
    plain = run_tiny_pipeline([FedAvg()], rounds=2)
    secure = run_tiny_pipeline([SecAggPlus(), FedAvg()], rounds=2)
    # per coordinate and round: the mean of 3 clients' quantised values is off by < 1 step of the weighted values
    assert 0 < max_gap(plain, secure) < 2 * 3 * step_size(8.0, 22)
    coarse = run_tiny_pipeline([SecAggPlus(field_bits=16, quant_bits=8, clip_range=1.0), FedAvg()], rounds=2)
    assert max_gap(plain, coarse) > max_gap(plain, secure)   # the step really is the error


def test_ledger_bytes_are_the_protocols_sizes():
    n, k = 3, 2                                               # 3 clients: the complete graph, degree 2
    result = run_tiny_pipeline([SecAggPlus(field_bits=16, quant_bits=10), FedAvg()], rounds=2)
    ledger = result.ledger
    per_round = {"secagg-keys": n * (64 + k * 68), "secagg-shares": 2 * n * k * 92, "secagg-unmask": n * k * (4 + 36)}
    for kind, size in per_round.items():
        assert ledger.total(kind=kind, round=0) == ledger.total(kind=kind, round=1) == size
    # the masked input is the upload: 16-bit ring elements, half the bytes of fp32 weights
    plain = run_tiny_pipeline([FedAvg()], rounds=1).ledger.total(direction="up", kind="weights", round=0)
    assert ledger.total(direction="up", kind="weights", round=0) * 2 == plain
    assert result.history.last("agg_secagg_bytes") == sum(per_round.values())


def test_protocol_time_is_priced_on_the_clock():
    profiles = presets()
    clock = dict(profiles=["phone", "laptop", "watch"])
    plain = run_tiny_pipeline([FedAvg()], rounds=2, clock=SimClock(), **clock)
    secure = run_tiny_pipeline([SecAggPlus(), FedAvg()], rounds=2, clock=SimClock(), **clock)
    extra = secure.history.column("agg_secagg_seconds")
    assert all(e > 0 for e in extra)
    gap = [s - p for s, p in zip(secure.history.column("virtual_time"), plain.history.column("virtual_time"))]
    assert gap == pytest.approx([extra[0], extra[0] + extra[1]])   # the jobs cost the same; the protocol is extra
    # by hand, the first stage: the slowest client sends 64 B and receives 2 x 68 B, in one message each way
    watch = profiles["watch"]
    advertise = 8 * 64 / watch.up_bps + 8 * 136 / watch.down_bps + 2 * watch.latency_s
    assert extra[0] >= advertise


def test_dropouts_during_the_protocol_recover_the_survivors_sum():
    result = run_tiny_pipeline([SecAggPlus(dropout=0.4, weighting="uniform"), FedAvg()], rounds=4, num_clients=6)
    survivors = result.history.column("agg_secagg_survivors")
    assert any(0 < s < 6 for s in survivors)                  # someone dropped, and the round still aggregated
    assert result.history.last("test_accuracy") > 0.25


def test_buffered_schedules_sum_their_buffer_and_fedasync_is_refused():
    result = run_tiny_pipeline([SecAggPlus(), BufferedSchedule(buffer_size=2), FedBuffStep()], rounds=3)
    assert [r["agg_secagg_survivors"] for r in result.history.rows] == [2.0, 2.0, 2.0]
    with pytest.raises(ConfigError, match="secagg needs at least 2 clients per aggregation .* AsyncSchedule"):
        fedcore.Pipeline([SecAggPlus(), AsyncSchedule()])


def test_per_job_and_vectorised_cohorts_agree():
    runs = [run_tiny_pipeline([SecAggPlus(), c, FedAvg()], rounds=2, fixture=fedcore.testing.ContractFixture(
        model_factory=fedcore.testing.tiny_model)) for c in (PerJobCohort(), VectorisedCohort(on_cpu="vectorise"))]
    assert max_gap(*runs) < 1e-4


def test_with_distributed_dp_the_server_sees_only_the_noised_sum():
    dp_fedavg = pytest.importorskip("fedcore_dp").DPFedAvg
    result = run_tiny_pipeline([SecAggPlus(weighting="uniform"),
                                dp_fedavg(noise="distributed", clients_per_round=3, noise_multiplier=1.0, clip=0.5),
                                FedAvg(weighting="uniform")], rounds=2)
    assert result.history.column("agg_dp_noise_multiplier") == pytest.approx([1.0, 1.0])  # 3 shares of 1/3 variance
    with pytest.raises(ConfigError, match="list SecAggPlus before dp-fedavg"):
        fedcore.Pipeline([dp_fedavg(noise="distributed", clients_per_round=3), SecAggPlus(weighting="uniform")])
    with pytest.raises(ConfigError, match="weighs clients equally"):
        fedcore.Pipeline([SecAggPlus(), dp_fedavg(noise="distributed", clients_per_round=3)])


@attrs.frozen(eq=False, kw_only=True)
class Krum:
    """A third-party robust rule: it declares that it needs each client's own update (it never runs here)."""

    needs_individual_updates = True

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        raise AssertionError("never reached: the pipeline is refused at build")


def test_aggregators_that_need_each_update_are_refused():
    with pytest.raises(ConfigError, match=r"^secagg gives the server only the sum .* aggregate = 'Krum' needs each"):
        fedcore.Pipeline([SecAggPlus(), Krum()])
    pytest.importorskip("fedcore_robust")
    for name in ("trimmed-mean", "median", "centred-clipping"):
        with pytest.raises(ConfigError, match=rf"secagg gives the server only the sum .* aggregate = '{name}'"):
            fedcore.Pipeline.from_config({"aggregate": name, "plugins": ["secagg"]})
    with pytest.raises(ConfigError, match="quant_bits=16 leaves no room"):
        fedcore.Pipeline([SecAggPlus(field_bits=16, quant_bits=16)])


@attrs.frozen(eq=False, kw_only=True)
class LogitUpload:
    """A share whose upload is labelled as logits."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, state, ctx):
        share = WholeModel().fedcore_split_model(model=model, client=client, state=state, ctx=ctx)
        return attrs.evolve(share, kinds={k: "logits" for k in share.upload})


def test_uploads_that_are_not_weights_are_refused():
    with pytest.raises(ConfigError, match=r"secagg sums weight changes, but the share uploads 'logits'"):
        run_tiny_pipeline([SecAggPlus(), LogitUpload()], rounds=1)


def test_the_upload_is_masked():
    seen = []

    @attrs.frozen(eq=False, kw_only=True)
    class Spy:
        """Keeps what the server receives."""

        @fedcore.hookimpl
        def fedcore_client_done(self, update):
            seen.append(update)

    run_tiny_pipeline([Spy(), SecAggPlus(), FedAvg()], rounds=1)
    assert seen and all(v.dtype == torch.int32 for u in seen for v in u.tensors.values())
    assert all("secagg.nonce" in u.meta for u in seen)
