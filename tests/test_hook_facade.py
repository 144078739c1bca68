"""The pipeline's hook facade: one typed method per hook, observers called through pluggy."""
from __future__ import annotations

import inspect

import attrs
import pytest

import fedcore
from fedcore import hookspecs
from fedcore.pipeline import Hooks
from fedcore.testing import run_tiny_pipeline


@attrs.frozen(eq=False, kw_only=True)
class Metric:
    """Contributes one metric."""

    key: str = "watched"
    value: float = 1.0

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx):
        return {self.key: self.value + ctx.round}


@attrs.frozen(eq=False, kw_only=True)
class Silent:
    """Observes the metrics hook and contributes nothing."""

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx):
        return None


@attrs.frozen(eq=False, kw_only=True)
class Prefix:
    """Wraps the metrics hook: renames every contributed key (what a namespacing wrapper does)."""

    prefix: str = "obs/"

    @fedcore.hookimpl(wrapper=True)
    def fedcore_collect_metrics(self, ctx):
        results = yield
        return [{self.prefix + k: v for k, v in r.items()} for r in results]


@attrs.frozen(eq=False, kw_only=True)
class Around:
    """Wraps every observer hook and records what it saw, before and after the observers ran."""

    log: list = attrs.field(factory=list)

    @fedcore.hookimpl(wrapper=True)
    def fedcore_round_start(self, ctx):
        self.log.append(("before round_start", ctx.round))
        out = yield
        self.log.append(("after round_start", ctx.round))
        return out

    @fedcore.hookimpl(wrapper=True)
    def fedcore_round_end(self, ctx, record):
        out = yield
        self.log.append(("round_end", ctx.round, sorted(k for k in record if k.startswith("obs/"))))
        return out

    @fedcore.hookimpl(wrapper=True)
    def fedcore_run_end(self, run, history):
        out = yield
        self.log.append(("run_end", len(history)))
        return out


def test_a_wrapper_on_collect_metrics_runs_and_sees_every_contribution():
    """Before 0.2.0 the facade called each implementation itself and crashed on a wrapper's generator."""
    result = run_tiny_pipeline([Prefix(), Metric(key="a"), Silent(), Metric(key="b", value=5.0)])
    assert [(r["obs/a"], r["obs/b"]) for r in result.history] == [(1.0, 5.0), (2.0, 6.0)]
    assert not any("a" in r or "b" in r for r in result.history)


def test_wrappers_on_the_other_observers_run_around_them():
    around = Around()
    result = run_tiny_pipeline([around, Prefix(), Metric(key="m")], rounds=2)
    assert around.log == [
        ("before round_start", 0), ("after round_start", 0), ("round_end", 0, ["obs/m"]),
        ("before round_start", 1), ("after round_start", 1), ("round_end", 1, ["obs/m"]),
        ("run_end", 2),
    ]
    assert [r["obs/m"] for r in result.history] == [1.0, 2.0]


def test_a_duplicate_metric_names_both_components():
    with pytest.raises(ValueError, match=r"metric 'x' is contributed by both 0:Metric and 2:Metric"):
        run_tiny_pipeline([Metric(key="x"), Metric(key="y"), Metric(key="x")])


def test_a_duplicate_metric_next_to_observers_that_returned_none_names_the_candidates():
    # pluggy drops None results, so the two contributors cannot be told apart from the silent ones
    with pytest.raises(ValueError, match=r"metric 'x' is contributed twice, by two of: 0:Silent, 1:Metric, "
                                         r"2:Silent, 3:Metric \(an observer that returns None"):
        run_tiny_pipeline([Silent(), Metric(key="x"), Silent(), Metric(key="x")])


def test_a_duplicate_metric_made_by_a_wrapper_is_still_an_error():
    @attrs.frozen(eq=False, kw_only=True)
    class Collapse:
        """A wrapper that renames every key to the same one."""

        @fedcore.hookimpl(wrapper=True)
        def fedcore_collect_metrics(self, ctx):
            results = yield
            return [{"same": sum(r.values())} for r in results]

    with pytest.raises(ValueError, match=r"metric 'same' is contributed by both 1:Metric and 2:Metric"):
        run_tiny_pipeline([Collapse(), Metric(key="a"), Metric(key="b")])


def test_tryfirst_on_an_observer_changes_which_component_is_named_first():
    @attrs.frozen(eq=False, kw_only=True)
    class Early:
        """Contributes first, whatever its place in the list."""

        @fedcore.hookimpl(tryfirst=True)
        def fedcore_collect_metrics(self, ctx):
            return {"x": 0.0}

    with pytest.raises(ValueError, match=r"metric 'x' is contributed by both 1:Early and 0:Metric"):
        run_tiny_pipeline([Metric(key="x"), Early()])


def _spec_parameters(hook: str) -> list[tuple[str, object]]:
    return [(p.name, p.annotation) for p in inspect.signature(getattr(hookspecs, hook)).parameters.values()]


@pytest.mark.parametrize("hook", [*hookspecs.SLOT_HOOKS.values(), *hookspecs.OBSERVER_HOOKS])
def test_the_facade_has_one_method_per_hook_with_the_spec_signature(hook):
    method = getattr(Hooks, hook, None)
    assert method is not None, f"fedcore.pipeline.Hooks needs a method {hook}(...) forwarding to the hook"
    params = list(inspect.signature(method).parameters.values())
    assert params[0].name == "self"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), "hooks are called by keyword"
    assert [(p.name, p.annotation) for p in params[1:]] == _spec_parameters(hook)


def test_the_facade_is_built_without_setattr():
    hooks = fedcore.Pipeline([]).hooks
    assert not vars(hooks).keys() - {"_pm", "_pipeline"}, "hook methods belong on the class, not the instance"
