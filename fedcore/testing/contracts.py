"""Contract checks every component must pass, per slot it fills (scikit-learn's ``parametrize_with_checks``).

    from fedcore.testing import parametrize_with_checks

    @parametrize_with_checks([TrimmedMean(), TrimmedMean(trim=0.2)])
    def test_contract(component, check):
        check(component)
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
import copy
import functools
import pickle
from typing import Any
import warnings

import attrs
import pluggy
import torch

from fedcore import hookspecs
from fedcore.engine.dispatch import build_job
from fedcore.errors import ConfigError
from fedcore.registry import slots_of
from fedcore.runtime.job_rng import seed_torch
from fedcore.testing.cohort import COHORT_CHECKS
from fedcore.testing.device_audit import DefaultDeviceAudit
from fedcore.testing.fixtures import CHECK_FIXTURE, ContractFixture, build_engine, round_context
from fedcore.testing.resume import RUN_CHECKS
from fedcore.types import ClientData, ClientUpdate

Check = Callable[[Any], None]


def _state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same_state(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- every component --------------------------------------------------------------------------

def check_is_frozen_attrs_with_identity(component: Any) -> None:
    cls = type(component)
    assert attrs.has(cls), f"{cls.__name__} must be an attrs class (@attrs.frozen(eq=False, kw_only=True))"
    assert cls.__eq__ is object.__eq__, f"{cls.__name__} must use eq=False: pluggy needs identity hashing"
    hash(component)


def check_pickles_and_evolves(component: Any) -> None:
    clone = pickle.loads(pickle.dumps(component))
    assert type(clone) is type(component), "pickling changed the component's type"
    evolved = attrs.evolve(component)
    assert type(evolved) is type(component)


def check_has_docstring(component: Any) -> None:
    doc = (type(component).__doc__ or "").strip()
    assert doc, f"{type(component).__name__} needs a docstring saying what it does and why"


def check_registers_cleanly(component: Any) -> None:
    pm = pluggy.PluginManager("fedcore")
    pm.add_hookspecs(hookspecs)
    pm.register(component)
    pm.check_pending()
    provides, wraps, observes = slots_of(component)
    assert provides or wraps or observes, f"{type(component).__name__} implements no fedcore hook"


def check_hook_signatures(component: Any) -> None:
    """Every hook method takes the spec's full argument set, so anyone can call or subclass it with the spec's
    keywords (pluggy would accept a subset, and the first caller passing ``state=`` gets a TypeError)."""
    import inspect

    short = []
    for name in dir(type(component)):
        method = getattr(type(component), name, None)
        spec = getattr(hookspecs, name, None)
        if not name.startswith("fedcore_") or spec is None or method is None or not hasattr(method, "fedcore_impl"):
            continue
        wanted = list(inspect.signature(spec).parameters)
        taken = set(inspect.signature(method).parameters) - {"self"}
        missing = [p for p in wanted if p not in taken]
        if missing:
            short.append(f"{name}({', '.join(wanted)}) lacks {', '.join(missing)}")
    assert not short, (f"{type(component).__name__}: every hook method takes the spec's full argument set "
                       f"(docs/hooks.md): {'; '.join(short)}")


# -- per slot ---------------------------------------------------------------------------------

def check_partition(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    part = engine.run_ctx.partition
    assert part is not None, "the partition slot returned nothing"
    n = len(engine.run_ctx.train)
    assert part.num_clients == fixture.num_clients
    for c, idx in enumerate(part.train):
        assert idx, f"client {c} got no samples"
        assert len(set(idx)) == len(idx), f"client {c} holds a sample twice"
        assert all(0 <= i < n for i in idx), f"client {c} has indices outside [0, {n})"
    again = build_engine([component], fixture).run_ctx.partition
    assert again is not None and again.train == part.train, "the same seed gave a different partition"


def check_split(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    ctx = round_context(engine)
    model = engine.run_ctx.server.model
    before = _state_copy(model)
    client = engine.run_ctx.clients[0]
    share = engine.hooks.fedcore_split_model(model=model, client=client, state=engine.run_ctx.client_states[0], ctx=ctx)
    assert share.module is not model, "the share must be a working copy, not the global model"
    names = set(share.module.state_dict())
    assert set(share.download) <= names, f"download names not in the share's module: {set(share.download) - names}"
    assert set(share.upload) <= names, f"upload names not in the share's module: {set(share.upload) - names}"
    assert _same_state(before, model.state_dict()), "building a share modified the global model"


def check_select(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    run = engine.run_ctx
    picks = []
    for _ in range(2):
        ctx = round_context(engine)
        job, share, _ = build_job(engine.parts, run.clients[0], ctx)
        before, training = _state_copy(share.module), share.module.training
        picks.append(tuple(engine.hooks.fedcore_select_data(
            client=run.clients[0], indices=job.pool, dataset=run.train, share=share,
            state=copy.deepcopy(run.client_states[0]), ctx=job.ctx)))
        assert _same_state(before, share.module.state_dict()), \
            "selecting data modified share.module (a forward pass in train mode updates BatchNorm statistics)"
        assert share.module.training == training, "selecting data left share.module in another train/eval mode"
    assert picks[0], "the selector chose no samples: a client that trains must get at least one"
    repeated = sorted({i for i in picks[0] if picks[0].count(i) > 1})
    assert not repeated, f"the selection holds indices more than once: {repeated[:8]}"
    assert set(picks[0]) <= set(job.pool), "selected indices are not a subset of the client's pool"
    assert picks[0] == picks[1], "the same seed selected different samples"


def _one_update(engine: Any) -> tuple[ClientUpdate, Any, dict[str, torch.Tensor]]:
    run = engine.run_ctx
    ctx = round_context(engine)
    client = run.clients[0]
    job, share, downloaded = build_job(engine.parts, client, ctx)
    with torch.random.fork_rng(devices=[]):
        seed_torch(job.ctx.seed_for("torch"))
        update = engine.hooks.fedcore_local_update(
            client=client, share=share, data=ClientData(dataset=run.train, indices=job.pool),
            state=copy.deepcopy(run.client_states[0]), ctx=job.ctx)
    return update, job, downloaded


def check_local_update(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    model = engine.run_ctx.server.model
    before = _state_copy(model)
    update, job, downloaded = _one_update(engine)
    assert _same_state(before, model.state_dict()), "the local update modified the global model"
    assert update.num_examples > 0, "num_examples must be > 0"
    assert set(update.tensors) <= set(job.share.upload), "uploaded entries outside share.upload"
    for k, v in update.tensors.items():
        assert torch.isfinite(v).all() if v.is_floating_point() else True, f"entry {k} is not finite"
    frozen = {n for n, p in job.share.module.named_parameters() if not p.requires_grad}
    for k in frozen & set(update.tensors) & set(downloaded):
        assert torch.equal(update.tensors[k], downloaded[k]), f"frozen parameter {k} changed"
    update2, _, _ = _one_update(build_engine([component], fixture))
    for k in update.tensors:
        assert torch.equal(update.tensors[k], update2.tensors[k]), f"entry {k} differs between two runs with one seed"


def _fake_updates(engine: Any, n: int, seed: int) -> list[ClientUpdate]:
    """``n`` seeded updates of what the fixture's split uploads (every floating entry under the whole-model split;
    a prompt share's context, not the frozen tower it never sends), each near the global model."""
    run = engine.run_ctx
    model = run.server.model
    share = engine.hooks.fedcore_split_model(model=model, client=run.clients[0],
                                             state=copy.deepcopy(run.client_states[0]), ctx=round_context(engine))
    g = torch.Generator().manual_seed(seed)
    state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    names = set(share.upload)
    uploaded = {k: v for k, v in state.items() if k in names}
    state = uploaded or state  # upload names outside the model's own (a split's module-relative names): all of it
    return [ClientUpdate(client_id=i, num_examples=10 + i,
                         tensors={k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in state.items()},
                         base={k: v.clone() for k, v in state.items()})
            for i in range(n)]


def check_aggregate_identity(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    model = engine.run_ctx.server.model
    one = _fake_updates(engine, 1, fixture.seed)[0]
    same = [attrs.evolve(one, client_id=i, tensors={k: v.clone() for k, v in one.tensors.items()}) for i in range(3)]
    held = _state_copy(model)
    out = engine.hooks.fedcore_aggregate(model=model, updates=same, ctx=round_context(engine))
    for k, v in out.state.items():  # an entry no update carries (a submodel share's rest) stays as the model holds it
        want = one.tensors[k] if k in one.tensors else held[k]
        assert v.shape == want.shape and v.dtype == want.dtype, f"entry {k} changed shape/dtype"
        assert torch.allclose(v, want, atol=1e-6), f"aggregating identical updates changed entry {k}"


def check_aggregate_does_not_mutate(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    model = engine.run_ctx.server.model
    updates = _fake_updates(engine, 3, fixture.seed)
    saved = [{k: v.clone() for k, v in u.tensors.items()} for u in updates]
    before = _state_copy(model)
    engine.hooks.fedcore_aggregate(model=model, updates=updates, ctx=round_context(engine))
    for u, s in zip(updates, saved):
        assert _same_state(u.tensors, s), "the aggregator modified a client update"
    assert _same_state(before, model.state_dict()), "the aggregator modified the global model in place"


def check_aggregate_single_client(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    model = engine.run_ctx.server.model
    out = engine.hooks.fedcore_aggregate(model=model, updates=_fake_updates(engine, 1, fixture.seed),
                                         ctx=round_context(engine))
    assert out.state, "aggregating one update returned no state"


def check_aggregate_order_invariant(component: Any, fixture: ContractFixture) -> None:
    """Client order does not change the aggregate; each order runs on a fresh engine (its own stash state)."""
    results = []
    for reverse in (False, True):
        engine = build_engine([component], fixture)
        model = engine.run_ctx.server.model
        updates = _fake_updates(engine, 3, fixture.seed)
        order = list(reversed(updates)) if reverse else updates
        results.append(engine.hooks.fedcore_aggregate(model=model, updates=order, ctx=round_context(engine)))
    a, b = results
    assert a.state.keys() == b.state.keys(), "client order changed which entries the aggregate names"
    for k in a.state:
        assert torch.allclose(a.state[k], b.state[k], atol=1e-6), f"client order changed entry {k}"


def check_aggregate_stays_on_the_models_device(component: Any, fixture: ContractFixture) -> None:
    """Every tensor the aggregate computes with lives where the model and the updates live: a tensor made without
    ``device=`` meeting them passes on the CPU and breaks on a GPU (:class:`DefaultDeviceAudit` shows it here). Two
    aggregations, so state kept from the first (moments, a previous centre) is used by the second."""
    engine = build_engine([component], fixture)
    model = engine.run_ctx.server.model
    for seed in (fixture.seed, fixture.seed + 1):
        updates = _fake_updates(engine, 3, seed)
        with DefaultDeviceAudit():
            engine.hooks.fedcore_aggregate(model=model, updates=updates, ctx=round_context(engine))


def check_scheduler(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    sched = engine.scheduler
    ids = [c.id for c in engine.run_ctx.clients]
    from fedcore.rng import numpy_generator

    first = list(sched.dispatch(round=0, now=0.0, idle=ids, busy=[], rng=numpy_generator(0, "s")))
    again = list(build_engine([component], fixture).scheduler.dispatch(round=0, now=0.0, idle=ids, busy=[],
                                                                         rng=numpy_generator(0, "s")))
    assert first, "the scheduler dispatched nobody at the start of a run"
    assert set(first) <= set(ids), "the scheduler dispatched unknown clients"
    assert first == again, "the same seed dispatched different clients"
    result = build_engine([component], fixture, rounds=2).run()
    assert len(result.history) == 2, "a two-round run did not end after two aggregations"


def check_evaluate(component: Any, fixture: ContractFixture) -> None:
    engine = build_engine([component], fixture)
    run = engine.run_ctx
    out = engine.hooks.fedcore_evaluate(model=run.server.model, dataset=run.test, clients=run.clients,
                                        states=run.client_states, ctx=round_context(engine))
    assert isinstance(out, Mapping), "evaluate must return a mapping of metric name -> number"
    for k, v in out.items():
        assert isinstance(k, str) and float(v) == float(v), f"metric {k}={v!r} is not a number"


SLOT_CHECKS: dict[str, list[Callable[..., None]]] = {
    "partition": [check_partition],
    "split": [check_split],
    "select": [check_select],
    "local_update": [check_local_update],
    "aggregate": [check_aggregate_identity, check_aggregate_does_not_mutate, check_aggregate_single_client,
                  check_aggregate_order_invariant, check_aggregate_stays_on_the_models_device],
    "schedule": [check_scheduler],
    "evaluate": [check_evaluate],
    "cohort": COHORT_CHECKS,
}
GENERIC_CHECKS: list[Check] = [check_is_frozen_attrs_with_identity, check_pickles_and_evolves, check_has_docstring,
                               check_registers_cleanly, check_hook_signatures]
ADVISORY_FOR_THIRD_PARTIES = frozenset({"check_hook_signatures", "check_aggregate_stays_on_the_models_device"})
"""Checks added within the 0.1 line: a third party's component that fails one warns (``AdvisoryCheckWarning``)
instead of failing, so a plugin written against an older 0.1 keeps passing its suite until 1.0."""


def checks_for(component: Any, fixture: ContractFixture | None = None) -> Iterator[Check]:
    """Every check that applies to ``component``: generic ones, then one group per slot it provides."""
    fx = fixture or CHECK_FIXTURE
    yield from GENERIC_CHECKS
    for slot in slots_of(component)[0]:
        for check in SLOT_CHECKS[slot]:
            yield _bind(check, fx)
    for check in RUN_CHECKS:
        yield _bind(check, fx)


COMPANIONS_HELP = ("if it needs other components to run (the share its local update expects, the aggregator "
                   "that merges its uploads) or a particular model, declare them: define __fedcore_checks__ returning "
                   "fedcore.testing.CheckPlan(fixture=ContractFixture(companions=[...], model_factory=...)) "
                   "(docs/plugins.md, \"Companions\")")


class ContractCheckError(AssertionError):
    """A contract check stopped inside the component with an error of its own; the message says how to declare
    the companions or model it may need (the original error is the ``__cause__``)."""


def _bind(check: Callable[..., None], fixture: ContractFixture) -> Check:
    def bound(component: Any) -> None:
        try:
            check(component, fixture=fixture)
        except AssertionError:
            raise
        except Exception as exc:  # not a contract violation the check asserts: the component could not run here
            raise ContractCheckError(f"{check.__name__}: {type(component).__name__} raised {type(exc).__name__}: "
                                     f"{exc}; {COMPANIONS_HELP}") from exc

    functools.update_wrapper(bound, check)
    return bound


class StaleExpectedFailureWarning(UserWarning):
    """A check a third-party component declared as an expected failure passes now: drop the declaration."""


class AdvisoryCheckWarning(UserWarning):
    """A third party's component fails a check added within 0.1: it will be required from 1.0."""


def advisory_check(check: Check) -> Check:
    """``check`` for a third party's component: a failure warns instead of failing (see ADVISORY_FOR_THIRD_PARTIES)."""

    def advisory(component: Any) -> None:
        try:
            check(component)
        except AssertionError as exc:
            warnings.warn(f"{check.__name__} (required from fedcore 1.0): {exc}", AdvisoryCheckWarning, stacklevel=2)

    functools.update_wrapper(advisory, check)
    return advisory


def first_party(cls: type) -> bool:
    """Whether ``cls`` comes from fedcore or one of its own distributions (whose declarations stay strict)."""
    from fedcore.first_party import distribution_of

    module = getattr(cls, "__module__", "") or ""
    return module.partition(".")[0] == "fedcore" or distribution_of(module) is not None


def expected_failure_marks(component: Any, checks: Sequence[Check], expected: Mapping[str, str], *,
                           strict: bool = True) -> dict[str, list[Any]]:
    """check name -> ``[pytest.mark.xfail(strict=True)]`` for each expected failure; unknown names are errors.

    ``strict=False`` (a third party's declarations) gives no marks: wrap those checks with
    :func:`lenient_check` instead, so a check fedcore fixed warns rather than failing the plugin's suite.
    """
    import pytest

    names = [c.__name__ for c in checks]
    unknown = sorted(set(expected) - set(names))
    if unknown:
        raise ConfigError(f"{type(component).__name__}: expected failure(s) {unknown} name no check it runs; "
                          f"its checks: {', '.join(names)}")
    if not strict:
        return {}
    return {name: [pytest.mark.xfail(reason=reason, strict=True)] for name, reason in expected.items()}


def lenient_check(check: Check, reason: str) -> Check:
    """``check`` as a third party's expected failure: xfails when it fails, warns when it passes.

    fedcore's own declarations are strict xfails (a fixed check fails the run until the declaration goes);
    a plugin written against an older fedcore must not break when fedcore fixes a check it declared.
    """
    import pytest

    def lenient(component: Any) -> None:
        try:
            check(component)
        except Exception as exc:  # the declared failure, as a strict xfail would take it
            pytest.xfail(f"{reason} ({type(exc).__name__}: {exc})")
        warnings.warn(f"{check.__name__} passes for {type(component).__name__}, which declares it an expected "
                      f"failure ({reason}): remove the declaration", StaleExpectedFailureWarning, stacklevel=2)

    functools.update_wrapper(lenient, check)
    return lenient


def declared_params(component: Any, checks: Sequence[Check], expected: Mapping[str, str], *, id_prefix: str,
                    strict_extra: Mapping[str, str] | None = None) -> list[Any]:
    """One ``pytest.param`` per check; ``expected`` (the component's and its author's declarations) is strict
    for fedcore's own components and lenient for third parties', ``strict_extra`` (fedcore's suite) always strict."""
    import pytest

    strict = first_party(type(component))
    marks = expected_failure_marks(component, checks, {**expected, **(strict_extra or {})})  # refuses unknown names
    params = []
    for check in checks:
        name = check.__name__
        lenient = not strict and name in expected and name not in (strict_extra or {})
        if not strict and name in ADVISORY_FOR_THIRD_PARTIES:
            check = advisory_check(check)
        params.append(pytest.param(component, lenient_check(check, expected[name]) if lenient else check,
                                   id=f"{id_prefix}-{name}", marks=() if lenient else marks.get(name, ())))
    return params


def parametrize_with_checks(components: Sequence[Any], *, fixture: ContractFixture | None = None,
                            expected_failed_checks: Mapping[str, str] | None = None):
    """A ``pytest.mark.parametrize`` over ``(component, check)`` pairs, one test id per check.

    ``expected_failed_checks`` maps a check name to the reason it does not apply (e.g. an
    order-dependent aggregator opts out of ``check_aggregate_order_invariant``), on top of the expected
    failures each component's class declares in its :class:`~fedcore.testing.CheckPlan` (whose fixture is
    used when ``fixture`` is not given). For fedcore's own components they are strict xfails; for a third
    party's, a declared check that passes warns (:class:`StaleExpectedFailureWarning`) instead of failing.
    """
    import pytest

    from fedcore.testing.plans import plan_for

    if any(isinstance(c, type) for c in components):
        raise TypeError("parametrize_with_checks takes component instances, not classes")
    params = []
    for i, component in enumerate(components):
        plan = plan_for(type(component))
        checks = list(checks_for(component, fixture or plan.fixture))
        expected = {**plan.expected_for(component), **(expected_failed_checks or {})}
        params += declared_params(component, checks, expected, id_prefix=f"{type(component).__name__}[{i}]")
    return pytest.mark.parametrize(("component", "check"), params)
