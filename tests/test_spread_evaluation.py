"""The global model's evaluation spread over the threads executor's idle workers: the inline numbers, bit for bit.

``fedcore.runtime.workers.spread`` runs a list of calls in the lent workers and hands the results back in item
order; the evaluation sums its batches in that order, so the history is the inline one whatever the number of
workers (the executor contract checks below, with an evaluation of several batches, under all four schedulers).
"""
from concurrent.futures import ThreadPoolExecutor
import threading
import time

import pytest
import torch
from torch import nn

from fedcore.builtin import GlobalEval, accuracy_and_loss
from fedcore.engine.threads_executor import ThreadsExecutor
from fedcore.runtime.workers import GlobalRandomDrawError, lent_workers, spread, workers_lent
from fedcore.testing import EXECUTOR_CHECKS, ContractFixture, tiny_data, tiny_model


def test_spread_without_lent_workers_is_a_loop_on_the_calling_thread():
    assert not workers_lent()
    names = spread(lambda i: (i, threading.current_thread().name), [1, 2, 3])
    assert names == [(i, threading.current_thread().name) for i in (1, 2, 3)]


def test_spread_hands_results_back_in_item_order_however_the_workers_finish():
    with ThreadPoolExecutor(2, thread_name_prefix="lent") as pool, lent_workers(pool):
        assert workers_lent()
        # the first items take longest: finishing order is the reverse of item order
        got = spread(lambda i: (time.sleep(0.02 * (4 - i)), i, threading.current_thread().name)[1:], [0, 1, 2, 3])
    assert [i for i, _ in got] == [0, 1, 2, 3]
    assert {name.split("_")[0] for _, name in got} == {"lent"}
    assert not workers_lent()


def test_work_that_draws_from_the_global_generator_in_the_workers_stops_with_one_line():
    with ThreadPoolExecutor(2) as pool, lent_workers(pool), \
            pytest.raises(GlobalRandomDrawError, match=r"the evaluation drew from torch's global random generator"):
        spread(lambda i: torch.rand(1), [0, 1], what="evaluation")


class NotesThreads(nn.Module):
    """The tiny model, noting which thread each evaluation batch ran on (no hook: a hooked model is not spread)."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.inner = tiny_model()
        self.seen = seen

    def forward(self, x):
        if not self.training:
            self.seen.append(threading.current_thread().name)
        return self.inner(x)


def test_the_evaluation_is_the_serial_one_whether_its_batches_are_spread_or_not():
    _, test = tiny_data(n=8, n_test=45)
    seen: list[str] = []
    torch.manual_seed(0)
    model = NotesThreads(seen)
    serial = accuracy_and_loss(model, test, batch_size=4)
    with ThreadPoolExecutor(3, thread_name_prefix="lent") as pool, lent_workers(pool):
        spread_out = accuracy_and_loss(model, test, batch_size=4)
        model.register_forward_hook(lambda *a: None)
        hooked = accuracy_and_loss(model, test, batch_size=4)
    assert serial == spread_out == hooked
    assert len(seen) == 3 * 12 and all(name.startswith("lent") for name in seen[12:24])
    assert not any(name.startswith("lent") for name in seen[:12] + seen[24:])  # serial, and hooked: here


EVAL_THREADS: list[str] = []


def noting_model() -> nn.Module:
    torch.manual_seed(0)
    return NotesThreads(EVAL_THREADS)


SPREAD_FIXTURE = ContractFixture(model_factory=noting_model, companions=(GlobalEval(batch_size=8),), num_clients=6)
"""The executor checks' job with an evaluation of six batches (48 test samples in batches of 8)."""


@pytest.mark.parametrize("check", EXECUTOR_CHECKS, ids=lambda c: c.__name__)
def test_a_spread_evaluation_keeps_the_inline_history_under_every_scheduler(check):
    EVAL_THREADS.clear()
    check(lambda: ThreadsExecutor(workers=2), fixture=SPREAD_FIXTURE)
    assert any(name.startswith("fedcore-client") for name in EVAL_THREADS)  # the threads runs evaluated there


def test_the_update_norm_check_runs_in_the_workers_and_keeps_the_inline_history(monkeypatch):
    from fedcore.builtin import UniformSync
    from fedcore.engine import update_norms
    from fedcore.testing import run_tiny_pipeline

    where: list[str] = []
    real = update_norms.delta_norm
    monkeypatch.setattr(update_norms, "delta_norm", lambda u: (where.append(threading.current_thread().name),
                                                               real(u))[1])
    fixture = ContractFixture(num_clients=6)
    inline = run_tiny_pipeline([UniformSync()], rounds=3, fixture=fixture, update_norm_bound=100.0)
    threaded = run_tiny_pipeline([UniformSync()], rounds=3, fixture=fixture, update_norm_bound=100.0,
                                 executor=ThreadsExecutor(workers=2))
    assert threaded.history.comparable() == inline.history.comparable()
    assert len(where) == 2 * 3 * 6 and all(n.startswith("fedcore-client") for n in where[18:])
