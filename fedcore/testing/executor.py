"""Contract checks for executors: the same run as the inline executor, whatever runs the client work.

    from fedcore.testing import EXECUTOR_CHECKS

    @pytest.mark.parametrize("check", EXECUTOR_CHECKS)
    def test_my_executor(check):
        check(lambda: MyExecutor(workers=2))

An executor may run a wave's jobs anywhere and in any order, but the engine relies on getting back exactly what
the inline executor gives: one result per job in job order, the client's state, every byte on the client's
channel, and updates computed from the job's own random streams. These checks run a tiny job with simulated
devices and faults under the four scheduler families (synchronous with sampling, semi-asynchronous, buffered,
asynchronous) and compare history, ledger, final model and client states with the inline run's, bit for bit;
the second check also stops the run after a round and resumes it from its checkpoint. ``make_executor`` builds
a fresh executor per run (the engine starts and closes it). ``threads`` fixes the calling thread's torch
intra-op count on both sides, since float reductions depend on it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
import contextlib
import tempfile
from typing import Any

import torch

from fedcore.builtin import AsyncSchedule, BufferedSchedule, FedAsyncMix, FedBuffStep, SemiAsyncSchedule, UniformSync
from fedcore.engine.checkpoint import Checkpointer
from fedcore.engine.history import RunResult
from fedcore.runtime import Faults, SimClock
from fedcore.testing.fixtures import ContractFixture, run_tiny_pipeline

MakeExecutor = Callable[[], Any]

SCHEDULES: dict[str, Callable[[], list[Any]]] = {
    "sync": lambda: [UniformSync(fraction=0.75)],
    "semi-async": lambda: [SemiAsyncSchedule(mu=0.5, t_clk=0.002)],
    "buffered": lambda: [BufferedSchedule(buffer_size=2, concurrency=4), FedBuffStep()],
    "async": lambda: [AsyncSchedule(concurrency=3), FedAsyncMix(alpha=0.6)],
}
"""The scheduler families every executor is checked under (components per run, built fresh)."""

EXECUTOR_FIXTURE = ContractFixture(num_clients=6)
PROFILES = ("watch", "watch", "phone", "phone", "laptop", "laptop")
ROUNDS = 4


class _Stop(Exception):
    """Stands for a crash of the run after a round's row was reported."""


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(schedule: str, executor: Any, fixture: ContractFixture, **kwargs: Any) -> RunResult:
    profiles = [PROFILES[c % len(PROFILES)] for c in range(fixture.num_clients)]
    return run_tiny_pipeline(SCHEDULES[schedule](), rounds=ROUNDS, fixture=fixture, executor=executor,
                             clock=SimClock(), profiles=profiles,
                             faults=Faults(dropout_during=0.2, lost_upload=0.1), **kwargs)


def _tensors_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> list[str]:
    """Names whose tensors differ (NaN equal to NaN), or that only one side has."""
    diff = sorted(set(a) ^ set(b))
    for k in set(a) & set(b):
        x, y = a[k], b[k]
        same = x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.isnan(), y.isnan()) \
            and torch.equal(x[~x.isnan()], y[~y.isnan()]) if x.is_floating_point() else torch.equal(x, y)
        if not same:
            diff.append(k)
    return sorted(diff)


def assert_same_run(got: RunResult, want: RunResult, where: str) -> None:
    """History rows (wall times aside), ledger rows, final weights and client states are identical."""
    rows, expected = got.history.comparable(), want.history.comparable()
    if rows != expected:
        at = next((i for i, (x, y) in enumerate(zip(rows, expected)) if x != y), min(len(rows), len(expected)))
        keys = sorted(k for k in set(rows[at]) | set(expected[at]) if rows[at].get(k) != expected[at].get(k)) \
            if at < min(len(rows), len(expected)) else ["(number of rows)"]
        raise AssertionError(f"{where}: the history differs from the inline executor's at row {at}: {keys[:8]}")
    assert got.ledger.to_rows() == want.ledger.to_rows(), f"{where}: the ledger differs from the inline executor's"
    diff = _tensors_equal(got.model.state_dict(), want.model.state_dict())
    assert not diff, f"{where}: the final model differs from the inline executor's at {diff[:6]}"
    participated = {c: s.rounds_participated for c, s in got.run.client_states.items()}
    expected_participation = {c: s.rounds_participated for c, s in want.run.client_states.items()}
    assert participated == expected_participation, f"{where}: the client states differ from the inline executor's"


_inline: dict[tuple[str, ContractFixture, int], RunResult] = {}


def _inline_run(schedule: str, fixture: ContractFixture) -> RunResult:
    """The inline reference of a check (kept: both checks compare with it)."""
    key = (schedule, fixture, torch.get_num_threads())
    if key not in _inline:
        _inline[key] = _run(schedule, None, fixture)
    return _inline[key]


def check_executor_gives_inline_history(make_executor: MakeExecutor, *, fixture: ContractFixture | None = None,
                                        threads: int | None = 1) -> None:
    """Under each scheduler family, a run with the executor is the inline run, bit for bit."""
    fx = fixture or EXECUTOR_FIXTURE
    with _torch_threads(threads):
        for schedule in SCHEDULES:
            want = _inline_run(schedule, fx)
            assert_same_run(_run(schedule, make_executor(), fx), want, f"{schedule} schedule")


def check_executor_resumes_to_inline_history(make_executor: MakeExecutor, *, fixture: ContractFixture | None = None,
                                             threads: int | None = 1, stop_after: int = 1) -> None:
    """Under each scheduler family, a run with the executor stopped after round ``stop_after`` (jobs may be in
    flight) and resumed from its checkpoint with a fresh executor is the uninterrupted inline run."""
    fx = fixture or EXECUTOR_FIXTURE

    def stop(row: dict[str, Any]) -> None:
        if row["round"] == stop_after + 1:  # this row is lost with the crash; round stop_after's checkpoint stays
            raise _Stop

    with _torch_threads(threads):
        for schedule in SCHEDULES:
            want = _inline_run(schedule, fx)
            with tempfile.TemporaryDirectory(prefix="fedcore-executor-check-") as root:
                try:
                    _run(schedule, make_executor(), fx, checkpoint=Checkpointer(root, every=1), on_round=stop)
                except _Stop:
                    pass
                else:
                    raise AssertionError(f"{schedule} schedule: the run was not stopped after round {stop_after}")
                resumed = _run(schedule, make_executor(), fx, checkpoint=Checkpointer(root, every=1, resume=True))
            assert_same_run(resumed, want, f"{schedule} schedule, stopped after round {stop_after} and resumed")


EXECUTOR_CHECKS = [check_executor_gives_inline_history, check_executor_resumes_to_inline_history]
"""Checks every executor must pass: each takes a zero-argument factory of fresh executors."""

__all__ = ["EXECUTOR_CHECKS", "EXECUTOR_FIXTURE", "SCHEDULES", "assert_same_run",
           "check_executor_gives_inline_history", "check_executor_resumes_to_inline_history"]
