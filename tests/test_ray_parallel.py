"""Parallel async on Ray: every job in flight runs at once, and the history is still the inline executor's.

The Ray executor's ``submit`` returns at once; the engine collects a job's result only when it needs it
(its arrival, a cancellation, a checkpoint, a read of the client's state). That is possible whenever the
arrival order is known before the jobs finish: without a clock, or with a clock that prices a job at dispatch
(``Clock.duration_at_dispatch``). With SimClock (priced from the finished job) the two-node test of
tests/test_ray_cluster.py covers the same four schedulers. Every test here runs on the run's one local Ray cluster
(``ray_cluster``, tests/conftest.py) on two actors kept for the whole module (``keep_workers``); one Ray run per
scheduler priced at dispatch serves the equivalence, the replacement and the resume checks.
"""
import importlib.util

import pytest
import torch

from fedcore.builtin import AsyncSchedule, BufferedSchedule, SemiAsyncSchedule, UniformSync
from fedcore.rng import numpy_generator
from fedcore.runtime import ClockBase, Faults
from fedcore.testing import ContractFixture, run_tiny_pipeline

if importlib.util.find_spec("ray") is None:  # looked up, not imported: the Ray group's worker imports it
    pytest.skip("needs ray", allow_module_level=True)
from fedcore.engine.ray_executor import RayExecutor  # noqa: E402


class DeviceTimes(ClockBase):
    """Seeded virtual seconds per (round, client), known before the job runs."""

    def duration_at_dispatch(self, client, *, share, round):
        return float(numpy_generator(7, "device-time", round, client.id).uniform(0.001, 0.02))


class CountingRay(RayExecutor):
    """Records, at every submit, how many jobs it was given and how many of its jobs were still uncollected, and
    which actors it submitted to."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.submits = []
        self.actors = set()

    def submit(self, jobs):
        handles = super().submit(jobs)
        self.submits.append((len(jobs), sum(self._outstanding)))
        self.actors.add(tuple(self._actors))
        return handles


SCHEDULES = {
    "sync-deadline": lambda: UniformSync(deadline=0.012),
    "async": lambda: AsyncSchedule(concurrency=4),
    "buffered": lambda: BufferedSchedule(buffer_size=2, concurrency=4),
    "semi-async": lambda: SemiAsyncSchedule(mu=0.5, t_clk=0.01),
}


def job(schedule, clock, executor=None, **kwargs):
    return run_tiny_pipeline([schedule], rounds=5, fixture=ContractFixture(num_clients=8), executor=executor,
                             clock=clock, faults=Faults(dropout_before=0.1, dropout_during=0.15, lost_upload=0.1),
                             **kwargs)


def same_run(distributed, inline, name):
    assert distributed.history.comparable() == inline.history.comparable(), name
    assert distributed.ledger.to_rows() == inline.ledger.to_rows(), name
    for k, v in inline.model.state_dict().items():
        assert torch.equal(v, distributed.model.state_dict()[k]), (name, k)
    assert ({c: s.rounds_participated for c, s in distributed.run.client_states.items()}
            == {c: s.rounds_participated for c, s in inline.run.client_states.items()}), name


def both_ways(names, clocked, executor):
    """Each schedule's job inline and on Ray (``executor``, counting its submits): {name: (inline, ray, submits)}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the actors use one intra-op thread; bit-identity needs the same here
    runs = {}
    try:
        for name in names:
            make = SCHEDULES[name]
            inline = job(make(), DeviceTimes() if clocked else None)
            first = len(executor.submits)
            distributed = job(make(), DeviceTimes() if clocked else None, executor)
            runs[name] = (inline, distributed, executor.submits[first:])
    finally:
        torch.set_num_threads(threads)
    return runs


@pytest.fixture(scope="module")
def workers(ray_cluster):
    """The two actors of every Ray run here, kept between runs (``keep_workers``): each run sends them its pipeline
    and training set, so only the first run starts actor processes, and every later run checks that kept actors
    give the inline history too. (The cluster's 2 CPUs are theirs while this module runs.)"""
    executor = CountingRay(num_workers=2, keep_workers=True)
    yield executor
    executor.release()


@pytest.fixture(scope="module")
def priced_at_dispatch(workers):
    """Every scheduler's job priced at dispatch, with faults, inline and on Ray: the equivalence, the replacement
    and the resume checks below read these runs (one Ray run per scheduler)."""
    return both_ways(tuple(SCHEDULES), clocked=True, executor=workers)


def test_parallel_ray_gives_the_inline_history_under_every_scheduler_priced_at_dispatch(priced_at_dispatch, workers):
    assert len(workers.actors) == 1  # every run on the two kept actors: the runs after the first reused them
    events = set()
    for name, (inline, distributed, submits) in priced_at_dispatch.items():
        assert submits, name  # the parallel path ran (submit, not run)
        same_run(distributed, inline, name)
        events |= {k for r in inline.history for k in ("dropout", "lost", "unavailable") if k in r}
    assert events == {"dropout", "lost", "unavailable"}  # every kind of fault happened on the way


def test_parallel_ray_gives_the_inline_history_without_a_clock(workers):
    for name, (inline, distributed, submits) in both_ways(("async", "buffered"), False, workers).items():
        assert submits, name
        same_run(distributed, inline, name)


@pytest.mark.parametrize("name", ["async", "buffered"])
def test_every_job_in_flight_is_running_when_a_replacement_is_submitted(priced_at_dispatch, name):
    first, *replacements = priced_at_dispatch[name][2]
    assert first == (4, 4)  # the opening wave
    assert len(replacements) >= 5
    # one replacement per arrival, submitted while the three other jobs in flight are still uncollected: the
    # engine waited only for the job that arrived (one job per arrival would show (1, 1) here), faults and all
    assert all(entry == (1, 4) for entry in replacements), replacements


class Stop(Exception):
    pass


def test_a_parallel_run_stopped_with_jobs_in_flight_resumes_to_the_same_history(priced_at_dispatch, workers, tmp_path):
    from fedcore.engine.checkpoint import Checkpointer

    def crash_after_round_3(row):
        if row["round"] == 3:  # rounds 0-2 are checkpointed, with jobs in flight; round 3's row is lost
            raise Stop

    def buffered_job(**kwargs):
        return job(SCHEDULES["buffered"](), DeviceTimes(), **kwargs)

    full = priced_at_dispatch["buffered"][0]  # the same job, uninterrupted, inline
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.raises(Stop):
            buffered_job(executor=workers, checkpoint=Checkpointer(tmp_path, every=1), on_round=crash_after_round_3)
        # the kept actors may still train the stopped run's jobs in flight: the resumed run's queue behind them
        resumed = buffered_job(executor=workers, checkpoint=Checkpointer(tmp_path, every=1, resume=True))
    finally:
        torch.set_num_threads(threads)
    assert resumed.history.comparable() == full.history.comparable()
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
