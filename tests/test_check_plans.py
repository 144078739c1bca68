"""Check plans: components declare how the contract checks build them and which checks fail on purpose."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import attrs
import pytest

import fedcore
from fedcore.builtin import FedAsyncMix, FedAvg, GivenPartition
from fedcore.errors import ConfigError
from fedcore.testing import CheckPlan, parametrize_registered, parametrize_with_checks, plan_for


def _params(mark):
    return mark.args[1]


def test_every_registered_component_is_checked_including_personal_prompt_eval():
    ids = {p.id.split("[")[0].rsplit("-construction", 1)[0] for p in _params(parametrize_registered())}
    assert set(fedcore.plugins.registry().names("component")) == ids
    assert "personal-prompt-eval" in ids


def test_declared_presets_and_expected_failures_are_used():
    assert plan_for(FedAvg) == CheckPlan()
    assert [c.parts for c in plan_for(GivenPartition).presets] == [(tuple(range(32)), tuple(range(32, 64)),
                                                                     tuple(range(64, 96)))]
    params = {p.id: p for p in _params(parametrize_with_checks([FedAsyncMix()]))}
    (xfail,) = params["FedAsyncMix[0]-check_aggregate_identity"].marks
    assert xfail.name == "xfail" and xfail.kwargs["strict"] is True and "alpha < 1" in xfail.kwargs["reason"]
    assert not params["FedAsyncMix[0]-check_aggregate_does_not_mutate"].marks


@attrs.frozen(eq=False, kw_only=True)
class Needy:
    """Cannot be built with defaults and declares nothing."""

    weight: float

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        return FedAvg().fedcore_aggregate(model, updates, ctx)


@attrs.frozen(eq=False, kw_only=True)
class Typo:
    """Declares an expected failure for a check that does not exist."""

    @classmethod
    def __fedcore_checks__(cls):
        return CheckPlan(expected_failures={"check_aggregate_identiy": "typo"})

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        return FedAvg().fedcore_aggregate(model, updates, ctx)


def test_a_class_without_defaults_or_presets_gets_one_failing_check_that_says_what_to_do():
    entry = attrs.make_class("E", {"name": attrs.field(), "obj": attrs.field()})(name="needy", obj=Needy)
    (param,) = _params(parametrize_registered([entry]))
    assert param.id == "needy-construction"
    component, check = param.values
    with pytest.raises(AssertionError, match=r"Needy\(\) fails .*declares no presets: define __fedcore_checks__"):
        check(component)


def test_bad_declarations_are_refused():
    with pytest.raises(ConfigError, match=r"expected failure\(s\) \['check_aggregate_identiy'\] name no check"):
        parametrize_with_checks([Typo()])
    with pytest.raises(ConfigError, match="needs a reason"):
        CheckPlan(expected_failures={"check_has_docstring": ""})
    with pytest.raises(TypeError, match="takes component instances; got the class FedAvg"):
        CheckPlan(presets=[FedAvg])


@pytest.mark.integration
def test_a_third_partys_stale_expected_failure_warns_and_fedcores_own_stays_strict(tmp_path):
    """A check fedcore fixed must not fail a plugin's suite: the third party's stale declaration warns
    (StaleExpectedFailureWarning), its still-failing declaration xfails; fedcore's own declaration is strict."""
    (tmp_path / "test_stale.py").write_text(textwrap.dedent('''
        import attrs
        import fedcore
        from fedcore.builtin import FedAsyncMix, FedAvg
        from fedcore.testing import CheckPlan, parametrize_with_checks

        @attrs.frozen(eq=False, kw_only=True)
        class Stale:
            """Declares a failure it no longer has, and one it still has."""

            @classmethod
            def __fedcore_checks__(cls):
                return CheckPlan(expected_failures={"check_aggregate_identity": "used to mix by alpha",
                                                    "check_has_docstring": "still failing, on purpose"})

            @fedcore.hookimpl
            def fedcore_aggregate(self, model, updates, ctx):
                return FedAvg().fedcore_aggregate(model, updates, ctx)

        Stale.__doc__ = None

        @parametrize_with_checks([Stale()])
        def test_third_party(component, check):
            check(component)

        @parametrize_with_checks([FedAvg()], expected_failed_checks={"check_aggregate_identity": "fedcore's own"})
        def test_first_party(component, check):
            check(component)
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rxX", "-k",
                          "check_aggregate_identity or check_has_docstring", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 1, out.stdout
    summary = out.stdout.splitlines()[-1]
    assert summary.startswith("1 failed,") and "1 xfailed" in summary and "warning" in summary, out.stdout
    strict = r"_ test_first_party\[FedAvg\[0\]-check_aggregate_identity\] _+\n\[XPASS\(strict\)\] fedcore's own"
    assert re.search(strict, out.stdout), out.stdout
    assert ("StaleExpectedFailureWarning: check_aggregate_identity passes for Stale, which declares it an expected "
            "failure (used to mix by alpha): remove the declaration") in out.stdout
    assert "XFAIL test_stale.py::test_third_party[Stale[0]-check_has_docstring] - still failing, on purpose" \
        in out.stdout


@attrs.frozen(eq=False, kw_only=True)
class ReadsItsShare:
    """A local update that reads what its own share writes in share.meta (it needs that share as a companion)."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        width = share.meta["width"]  # KeyError next to the default whole-model share
        raise AssertionError(f"unreachable: {width}")


def test_a_check_that_stops_inside_the_component_points_to_companions():
    from fedcore.testing import ContractCheckError, checks_for

    check = next(c for c in checks_for(ReadsItsShare()) if c.__name__ == "check_local_update")
    with pytest.raises(ContractCheckError) as exc:
        check(ReadsItsShare())
    message = str(exc.value)
    assert message.startswith("check_local_update: ReadsItsShare raised KeyError: 'width'; if it needs other "
                              "components to run")
    assert "__fedcore_checks__" in message and "ContractFixture(companions=[...]" in message
    assert 'docs/plugins.md, "Companions"' in message and isinstance(exc.value.__cause__, KeyError)
