"""DP-FedAvg refuses, in one line, what it cannot bound or wrap."""
import attrs
import pytest

import fedcore
from fedcore import ConfigError
from fedcore.builtin import WholeModel
from fedcore.testing import run_tiny_pipeline
from fedcore_dp import DPFedAvg


@attrs.frozen(eq=False, kw_only=True)
class Krum:
    """A third-party robust rule: it declares that it needs each client's own update (it never runs here)."""

    needs_individual_updates = True

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        raise AssertionError("never reached: the pipeline is refused at build")


def test_aggregators_that_need_each_update_are_refused_at_build():
    with pytest.raises(ConfigError, match=r"^dp-fedavg hands the aggregator one update .* 'Krum' needs each"):
        fedcore.Pipeline([DPFedAvg(), Krum()])
    pytest.importorskip("fedcore_robust")
    for name in ("median", "trimmed-mean", "centred-clipping"):  # centred-clipping slipped through a name list once
        with pytest.raises(ConfigError, match=rf"aggregate = '{name}' needs each client's own update"):
            fedcore.Pipeline.from_config({"aggregate": name, "plugins": ["dp-fedavg"]})


@attrs.frozen(eq=False, kw_only=True)
class FeatureUpload:
    """A share whose upload is labelled as features (as a distillation method's)."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, state, ctx):
        share = WholeModel().fedcore_split_model(model=model, client=client, state=state, ctx=ctx)
        return attrs.evolve(share, kinds={k: "features" for k in share.upload})


def test_uploads_that_are_not_weights_are_refused():
    with pytest.raises(ConfigError, match=r"dp-fedavg bounds weight deltas, but the share uploads 'features'"):
        run_tiny_pipeline([DPFedAvg(), FeatureUpload()], rounds=1)


def test_distributed_noise_needs_the_cohort_size():
    with pytest.raises(ConfigError, match=r"noise='distributed' needs clients_per_round"):
        fedcore.Pipeline([DPFedAvg(noise="distributed")])


def test_settings_are_checked():
    with pytest.raises(ConfigError, match=r"DPFedAvg.clipping='x' is not allowed"):
        DPFedAvg(clipping="x")
    with pytest.raises(ConfigError, match=r"DPFedAvg.accountant='moments' is not allowed"):
        DPFedAvg(accountant="moments")
