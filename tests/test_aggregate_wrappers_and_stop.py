"""Small public additions for privacy plugins (issue 27): aggregate wrappers may replace what their provider sees,
an aggregation may take virtual time, and a component may end a run early."""
import attrs
import pytest

import fedcore
from fedcore.builtin import FedAvg
from fedcore.runtime import SimClock
from fedcore.testing import run_tiny_pipeline


@attrs.frozen(eq=False, kw_only=True)
class OnlyFirst:
    """Wrapper: the aggregator sees only the first update; the aggregation takes 2.5 virtual seconds."""

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, updates):
        original = list(updates)
        updates[:] = original[:1]
        try:
            result = yield
        finally:
            updates[:] = original
        return attrs.evolve(result, metrics={"seen": 1.0}, virtual_seconds=2.5)


def test_a_wrapper_replaces_the_updates_and_the_row_keeps_the_arrivals():
    seen = []

    @attrs.frozen(eq=False, kw_only=True)
    class Count:
        """Provider that records how many updates it was given."""

        @fedcore.hookimpl
        def fedcore_aggregate(self, model, updates, ctx):
            seen.append(len(updates))
            return FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)

    @attrs.frozen(eq=False, kw_only=True)
    class Careless:
        """Replaces the updates and does not put them back: the engine's own list is a different one."""

        @fedcore.hookimpl(wrapper=True)
        def fedcore_aggregate(self, updates):
            updates[:] = updates[:1]
            return (yield)

    for wrapper in (OnlyFirst(), Careless()):
        seen.clear()
        result = run_tiny_pipeline([wrapper, Count()], rounds=2)
        assert seen == [1, 1]
        assert result.history.column("clients") == [[0, 1, 2], [0, 1, 2]]


def test_aggregation_time_moves_the_virtual_clock():
    kwargs = dict(rounds=2, clock=SimClock(), profiles=["phone"] * 3)
    plain = run_tiny_pipeline([], **kwargs).history.column("virtual_time")
    slow = run_tiny_pipeline([OnlyFirst()], **kwargs).history.column("virtual_time")
    assert slow == pytest.approx([plain[0] + 2.5, plain[1] + 5.0])


@attrs.frozen(eq=False, kw_only=True)
class StopAfter:
    """Ends the run after round ``last``."""

    last: int = 1

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx):
        if ctx.round == self.last:
            ctx.run.request_stop("enough")


def test_request_stop_ends_the_run_after_the_round():
    result = run_tiny_pipeline([StopAfter(last=1)], rounds=5)
    assert len(result.history.rows) == 2 and result.run.stop_reason == "enough"
    assert run_tiny_pipeline([], rounds=3).run.stop_reason is None
