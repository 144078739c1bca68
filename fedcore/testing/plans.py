"""How the contract checks build and run a component class: its declared :class:`CheckPlan`.

A component that cannot be checked as ``Cls()`` on the default fixture, or that fails a check on
purpose, says so on the class (scikit-learn's ``__sklearn_tags__`` idea), lazily, so nothing is built
at import time::

    @attrs.frozen(eq=False, kw_only=True)
    class FedAsyncMix:
        @classmethod
        def __fedcore_checks__(cls):
            from fedcore.testing import CheckPlan

            return CheckPlan(expected_failures={"check_aggregate_identity": "mixes by alpha < 1"})

:func:`parametrize_registered` contract-checks every component in the catalogue this way (timm's
"every registered model" tests); :func:`~fedcore.testing.parametrize_with_checks` honours the same
declarations. A declared failure of one of fedcore's own components is an xfail with ``strict=True``: a
check that starts passing fails the run (XPASS(strict)), so stale declarations do not linger. A third party's
declaration is lenient: the check xfails while it fails and warns (``StaleExpectedFailureWarning``) once it
passes, so a plugin written against an older fedcore keeps passing its suite when fedcore fixes a check.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.testing.fixtures import ContractFixture

HOOK = "__fedcore_checks__"
"""The classmethod a component class defines to declare its :class:`CheckPlan`."""


def _presets(values: Sequence[Any]) -> tuple[Any, ...]:  # typed: mypy cannot type ``converter=tuple``
    return tuple(values)


@attrs.frozen(kw_only=True)
class CheckPlan:
    """What the contract checks run a component class as.

    ``presets``: the instances to check (empty: the class built with its defaults). ``fixture``: the
    model, data and companion components to run them on (``None``: :class:`ContractFixture`'s tiny
    MLP and blobs). ``expected_failures``: check name -> why it does not apply to this component, or
    a function of the instance giving that mapping (when only some settings fail a check on purpose).
    """

    presets: Sequence[Any] = attrs.field(default=(), converter=_presets)
    fixture: ContractFixture | None = None
    expected_failures: Mapping[str, str] | Callable[[Any], Mapping[str, str]] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for p in self.presets:
            if isinstance(p, type):
                raise TypeError(f"CheckPlan.presets takes component instances; got the class {p.__name__}")
        if not callable(self.expected_failures):
            _check_reasons(self.expected_failures)

    def expected_for(self, component: Any) -> dict[str, str]:
        """The checks ``component`` is declared to fail, with the reasons."""
        declared = self.expected_failures
        return _check_reasons(declared(component) if callable(declared) else declared)


def _check_reasons(expected: Mapping[str, str]) -> dict[str, str]:
    for name, reason in expected.items():
        if not (isinstance(reason, str) and reason.strip()):
            raise ConfigError(f"CheckPlan.expected_failures[{name!r}] needs a reason, got {reason!r}")
    return dict(expected)


def plan_for(cls: type) -> CheckPlan:
    """The plan ``cls`` declares with ``__fedcore_checks__``, or the default plan."""
    declare = getattr(cls, HOOK, None)
    if declare is None:
        return CheckPlan()
    plan = declare()
    if not isinstance(plan, CheckPlan):
        raise TypeError(f"{cls.__qualname__}.{HOOK}() must return a fedcore.testing.CheckPlan, got {plan!r}")
    bad = [p for p in plan.presets if type(p) is not cls]
    if bad:
        raise TypeError(f"{cls.__qualname__}.{HOOK}() presets must be {cls.__name__} instances, got {bad!r}")
    return plan


def parametrize_registered(entries: Sequence[Any] | None = None, *,
                           known_failures: Mapping[str, Mapping[str, str]] | None = None) -> Any:
    """A ``pytest.mark.parametrize`` over ``(component, check)`` for every registered component class.

    ``entries`` defaults to ``fedcore.list_components()``. Each class is checked as its plan says;
    a class that cannot be built with its defaults and declares no presets gets one failing check
    that says so. ``known_failures`` maps a registered name to ``{check name: reason}``: failures the
    caller knows of (a bug tracked elsewhere), xfailed strictly on top of the class's own declarations
    (strict for fedcore's own classes, lenient for a third party's).
    """
    import pytest

    from fedcore.plugins import list_components
    from fedcore.testing.contracts import checks_for, declared_params

    params = []
    listed = list(entries if entries is not None else list_components())
    unknown = sorted(set(known_failures or {}) - {e.name for e in listed})
    if unknown:
        raise ConfigError(f"known_failures names components that are not registered: {unknown}")
    for entry in listed:
        cls = entry.obj
        plan = plan_for(cls)
        try:
            components = list(plan.presets) or [cls()]
        except Exception as exc:  # reported as a failing check, so one bad class does not hide the others
            params.append(pytest.param(cls, _unbuildable(cls, exc), id=f"{entry.name}-construction"))
            continue
        for i, component in enumerate(components):
            checks = list(checks_for(component, plan.fixture))
            params += declared_params(component, checks, plan.expected_for(component), id_prefix=f"{entry.name}[{i}]",
                                      strict_extra=(known_failures or {}).get(entry.name, {}))
    return pytest.mark.parametrize(("component", "check"), params)


def _unbuildable(cls: type, exc: Exception):
    def check_builds_with_defaults_or_declares_presets(component: Any) -> None:
        raise AssertionError(f"{cls.__qualname__}() fails ({exc!r}) and the class declares no presets: "
                             f"define {HOOK}() returning fedcore.testing.CheckPlan(presets=[...])")

    return check_builds_with_defaults_or_declares_presets


__all__ = ["HOOK", "CheckPlan", "parametrize_registered", "plan_for"]
