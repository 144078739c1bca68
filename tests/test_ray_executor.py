"""Ray executor: bad addresses fail fast, split shares are refused, a wave is split into one cohort per worker.

The tests taking ``workers`` share the run's one local Ray cluster (tests/conftest.py) and two actors kept for the
module. That every scheduler,
with faults and the virtual clock, gives the inline executor's history on Ray is checked on a two-node cluster in
tests/test_ray_cluster.py, and with jobs priced at dispatch in tests/test_ray_parallel.py."""
import importlib.util
import time

import pytest
import torch

from fedcore.builtin import UniformSync
from fedcore.errors import ConfigError
from fedcore.testing import ContractFixture, run_tiny_pipeline

if importlib.util.find_spec("ray") is None:  # looked up, not imported: the Ray group's worker imports it
    pytest.skip("needs ray", allow_module_level=True)
from fedcore.engine.ray_executor import RayExecutor  # noqa: E402


def test_unreachable_or_malformed_address_fails_before_any_work():
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="cannot reach the Ray cluster at 127.0.0.1:9"):
        RayExecutor(address="127.0.0.1:9", connect_timeout=1.0)
    with pytest.raises(ConfigError, match="host:port"):
        RayExecutor(address="nowhere")
    with pytest.raises(ConfigError, match="num_workers"):
        RayExecutor(num_workers=0)
    assert time.perf_counter() - start < 10


@pytest.fixture(scope="module")
def workers(ray_cluster):
    """Two actors kept for every Ray run of this module (``keep_workers``: each run sends them its pipeline and
    training set instead of starting actor processes). The cluster's 2 CPUs are theirs while this module runs."""
    executor = RayExecutor(num_workers=2, keep_workers=True)
    yield executor
    executor.release()


def test_shares_with_a_server_endpoint_are_refused_at_the_first_dispatch(workers):
    from fedcore.models import micro_vit
    from fedcore.split import SplitFedV1
    from fedcore.testing import tiny_data

    def small_vit():
        torch.manual_seed(0)
        return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)

    fixture = ContractFixture(model_factory=small_vit, data_factory=lambda: tiny_data(n=48, n_test=24))
    seen = []
    with pytest.raises(ConfigError, match=r"RayExecutor cannot run shares with a server endpoint "
                                          r"\(clients \[0, 1, 2\], endpoint Endpoint\).*inline executor"):
        run_tiny_pipeline([SplitFedV1()], rounds=1, fixture=fixture, executor=workers,
                          on_round=seen.append)  # the refusal comes before any job reaches an actor
    assert seen == []  # refused before any client trained or any round finished


def test_ray_splits_a_wave_into_one_cohort_per_worker(workers):
    import sys

    import attrs

    import fedcore
    from fedcore.builtin import SGDUpdate

    @attrs.frozen(eq=False, kw_only=True)
    class SizedCohort:
        """The default per-job training, reporting how many jobs its cohort held."""

        @fedcore.hookimpl
        def fedcore_train_cohort(self, jobs, ctx):
            out = []
            for job in jobs:
                torch.manual_seed(job.ctx.seed_for("torch"))
                u = job.local_update(job.select_data())
                out.append(attrs.evolve(u, client_id=job.client.id, metrics={**u.metrics, "cohort": len(jobs)}))
            return out

    @attrs.frozen(eq=False, kw_only=True)
    class Sizes:
        """Records the cohort size each arriving update reports."""

        seen: list = attrs.field(factory=list)

        @fedcore.hookimpl
        def fedcore_client_done(self, update):
            self.seen.append(int(update.metrics["cohort"]))

    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {}
        for name, executor in (("inline", None), ("ray", workers)):
            sizes = Sizes()
            result = run_tiny_pipeline([SizedCohort(), SGDUpdate(), sizes, UniformSync(fraction=1.0)], rounds=2,
                                       fixture=ContractFixture(num_clients=5), executor=executor)
            runs[name] = (result, sizes.seen)
    finally:
        torch.set_num_threads(threads)
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert runs["inline"][1] == [5] * 10  # inline: the whole wave is one cohort
    assert runs["ray"][1] == [3, 2, 3, 2, 3] * 2  # ray: clients 0,2,4 on worker 0 and 1,3 on worker 1, by client id
    assert ([r["test_accuracy"] for r in runs["inline"][0].history]
            == [r["test_accuracy"] for r in runs["ray"][0].history])


def test_vectorised_auto_on_ray_workers_records_their_choice_on_the_server(workers):
    """Under Ray each worker's cohort decides ``on_cpu = "auto"`` (this machine's cached probe, or a probe whose
    first writer wins); the choice reaches the run's record with the updates, later waves replay it, and the
    history counts the clients trained vectorised on the workers."""
    from fedcore.builtin import SGDUpdate, VectorisedCohort
    from fedcore.builtin.vectorised_cohort import CHOICES

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = run_tiny_pipeline([VectorisedCohort(), SGDUpdate(), UniformSync(fraction=1.0)], rounds=2,
                                   fixture=ContractFixture(num_clients=6), executor=workers)
    finally:
        torch.set_num_threads(threads)
    (record,) = result.run.settings[CHOICES].values()
    assert record["choice"] in ("vectorise", "one-by-one") and record["by"] in ("probe", "cached probe")
    assert result.history.column("cohort_vectorised") == [6.0 if record["choice"] == "vectorise" else 0.0] * 2


def test_kept_workers_train_each_run_with_that_runs_pipeline(workers):
    """``keep_workers``: a run on actors kept from an earlier run trains with its own pipeline and training set,
    not the earlier run's (two learning rates, two data seeds: each Ray run gives its own inline history), on the
    same two actors."""
    from fedcore.builtin import SGDUpdate
    from fedcore.testing import tiny_data

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        def run(lr, seed, executor=None):
            fixture = ContractFixture(num_clients=4, data_factory=lambda: tiny_data(n=64, n_test=32, seed=seed))
            return run_tiny_pipeline([SGDUpdate(lr=lr), UniformSync(fraction=1.0)], rounds=2, fixture=fixture,
                                     executor=executor)

        seen = []
        for lr, seed in ((0.05, 0), (0.5, 1)):
            inline, on_ray = run(lr, seed), run(lr, seed, workers)
            seen.append((inline.history.comparable(), tuple(workers._actors)))
            assert on_ray.history.comparable() == inline.history.comparable(), lr
    finally:
        torch.set_num_threads(threads)
    (first, actors), (second, again) = seen
    assert first != second and len(actors) == 2 and again == actors  # two different runs on the same two actors
