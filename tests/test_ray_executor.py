"""Ray executor: identical histories to the inline executor for every scheduler with faults; bad addresses fail fast.

The tests taking ``ray_cluster`` share the run's one local Ray cluster (tests/conftest.py)."""
import time

import pytest
import torch

from fedcore.builtin import AsyncSchedule, BufferedSchedule, SemiAsyncSchedule, UniformSync
from fedcore.errors import ConfigError
from fedcore.runtime import Faults, ProfileAssignment, SimClock
from fedcore.testing import ContractFixture, run_tiny_pipeline

ray = pytest.importorskip("ray")
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


SCHEDULES = {
    "sync-deadline": UniformSync(deadline=0.012),  # watches (~18 ms per job) miss it, phones (~7 ms) make it
    "async": AsyncSchedule(concurrency=4),
    "buffered": BufferedSchedule(buffer_size=2, concurrency=4),
    "semi-async": SemiAsyncSchedule(mu=0.5, t_clk=0.005),
}


def job(schedule, executor=None):
    fixture = ContractFixture(num_clients=6)
    return run_tiny_pipeline(
        [schedule], rounds=4, fixture=fixture, executor=executor, clock=SimClock(),
        profiles=ProfileAssignment(weights={"watch": 2, "phone": 2, "laptop": 2}),
        faults=Faults(dropout_before=0.1, dropout_during=0.15, lost_upload=0.1))


def test_every_scheduler_gives_identical_results_inline_and_on_ray(ray_cluster):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the actors use one intra-op thread; bit-identity needs the same here
    events = set()
    try:
        for name, schedule in SCHEDULES.items():
            inline = job(schedule)
            distributed = job(schedule, RayExecutor(num_workers=2))
            assert distributed.history.comparable() == inline.history.comparable(), name
            assert distributed.ledger.to_rows() == inline.ledger.to_rows(), name
            for k, v in inline.model.state_dict().items():
                assert torch.equal(v, distributed.model.state_dict()[k]), (name, k)
            states = {c: s.rounds_participated for c, s in distributed.run.client_states.items()}
            assert states == {c: s.rounds_participated for c, s in inline.run.client_states.items()}
            events |= {k for r in inline.history for k in ("dropout", "lost", "unavailable", "cancelled") if k in r}
    finally:
        torch.set_num_threads(threads)
    assert events == {"dropout", "lost", "unavailable", "cancelled"}  # every kind of fault was exercised


def test_shares_with_a_server_endpoint_are_refused_at_the_first_dispatch(ray_cluster):
    from fedcore.models import micro_vit
    from fedcore.split import SplitFedV1
    from fedcore.testing import tiny_data

    def small_vit():
        torch.manual_seed(0)
        return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)

    fixture = ContractFixture(model_factory=small_vit, data_factory=lambda: tiny_data(n=48, n_test=24))
    seen = []
    with pytest.raises(ConfigError, match=r"RayExecutor cannot run shares with a server endpoint \(clients \[0, 1, 2\], "
                                          r"endpoint Endpoint\).*inline executor"):
        run_tiny_pipeline([SplitFedV1()], rounds=1, fixture=fixture, executor=RayExecutor(num_workers=2),
                          on_round=seen.append)
    assert seen == []  # refused before any client trained or any round finished


def test_ray_splits_a_wave_into_one_cohort_per_worker(ray_cluster):
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

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {}
        for name, executor in (("inline", None), ("ray", RayExecutor(num_workers=2))):
            sizes = Sizes()
            result = run_tiny_pipeline([SizedCohort(), SGDUpdate(), sizes, UniformSync(fraction=1.0)], rounds=2,
                                       fixture=ContractFixture(num_clients=5), executor=executor)
            runs[name] = (result, sizes.seen)
    finally:
        torch.set_num_threads(threads)
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert runs["inline"][1] == [5] * 10  # inline: the whole wave is one cohort
    assert runs["ray"][1] == [3, 2, 3, 2, 3] * 2  # ray: clients 0,2,4 on worker 0 and 1,3 on worker 1, by client id
    assert [r["test_accuracy"] for r in runs["inline"][0].history] == [r["test_accuracy"] for r in runs["ray"][0].history]
