"""Pipeline: exactly the components it is given, one provider per slot, on its own PluginManager.

    pipe = fedcore.Pipeline([DirichletPartition(alpha=0.5), SGDUpdate(lr=0.05), FedAvg()])
    result = pipe.run(model=model, train=train, test=test, num_clients=10, rounds=5, seed=0)

List order is call order for wrappers and observers (the first listed wraps outermost). A slot
without a provider gets the built-in default. Two providers, a provider with ordering flags, an
old-style ``hookwrapper`` or a class passed instead of an instance are errors.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache, cached_property
from importlib import metadata
import os
import sys
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from fedcore import hookspecs
from fedcore import plugins as catalogue
from fedcore.errors import ConfigError, MissingSlotError, SlotConflictError
from fedcore.hookspecs import SLOT_HOOKS
from fedcore.registry import slots_of
from fedcore.settings import build, settings_of
from fedcore.types import (
    AggregateResult,
    ClientData,
    ClientFailed,
    ClientInfo,
    ClientState,
    ClientUpdate,
    DropUpdate,
    JobPlan,
    Partition,
    Share,
)
from fedcore.uploads import check_uploads

if TYPE_CHECKING:
    import torch
    from torch import nn

    from fedcore.contexts import RoundContext, RunContext
    from fedcore.engine.history import RunResult
    from fedcore.jobs import ClientJob
    from fedcore.scheduling import Scheduler


def _default_providers() -> dict[str, Any]:
    from fedcore.builtin import defaults

    return defaults.DEFAULTS


@cache
def _plugin_distributions() -> dict[str, str]:
    """Top-level module -> distribution, from the ``fedcore`` entry points (a few ms: no file is read)."""
    found: dict[str, str] = {}
    for ep in metadata.entry_points(group="fedcore"):
        if ep.dist is not None:
            found.setdefault(ep.module.split(".")[0], ep.dist.name)
    return found


@cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """Every installed top-level module's distributions: reads every distribution's file list (~1 s), so once."""
    return metadata.packages_distributions()


@cache
def _distribution_of(module: str) -> tuple[str | None, str | None]:
    """(distribution, version) that installed ``module``: the plugin's whose package holds it, from the entry points,
    else from the file lists of every installed distribution (read once per process: hundreds of files each)."""
    top = module.split(".")[0]
    plugin = _plugin_distributions().get(top)
    candidates = [plugin] if plugin is not None else _packages_distributions().get(top, [])
    for dist in candidates:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


class Hooks:
    """Typed facade over a pipeline's hooks: one method per hook, with the hookspec's signature.

    Every call goes through pluggy, so wrappers run around slots and observers alike. A slot that
    returns ``None`` is an error naming its provider; ``fedcore_collect_metrics`` returns the
    contributions merged into one dict (a key given twice is an error naming both components).
    """

    def __init__(self, pm: pluggy.PluginManager, pipeline: Pipeline) -> None:
        self._pm = pm
        self._pipeline = pipeline

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline these hooks call (a cohort trainer reads the local update's settings from it)."""
        return self._pipeline

    def _slot(self, hook: str, **kwargs: Any) -> Any:
        caller = getattr(self._pm.hook, hook)
        result = caller(**kwargs)
        if result is None:
            providers = [self._pipeline.name_of(i.plugin) for i in caller.get_hookimpls() if not i.wrapper]
            raise MissingSlotError(f"{hook} returned None (provider: {', '.join(providers) or 'none'})")
        return result

    # -- slots (firstresult: exactly one provider) -------------------------------------------

    def fedcore_partition(self, *, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        return self._slot("fedcore_partition", dataset=dataset, num_clients=num_clients, test_dataset=test_dataset,
                          run=run)

    def fedcore_make_scheduler(self, *, clients: Sequence[ClientInfo], run: RunContext) -> Scheduler:
        return self._slot("fedcore_make_scheduler", clients=clients, run=run)

    def fedcore_split_model(self, *, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        return self._slot("fedcore_split_model", model=model, client=client, state=state, ctx=ctx)

    def fedcore_select_data(self, *, client: ClientInfo, indices: Sequence[int], dataset: Any, share: Share,
                            state: ClientState, ctx: RoundContext) -> Sequence[int]:
        return self._slot("fedcore_select_data", client=client, indices=indices, dataset=dataset, share=share,
                          state=state, ctx=ctx)

    def fedcore_local_update(self, *, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        return self._slot("fedcore_local_update", client=client, share=share, data=data, state=state, ctx=ctx)

    def fedcore_aggregate(self, *, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        return self._slot("fedcore_aggregate", model=model, updates=updates, ctx=ctx)

    def fedcore_evaluate(self, *, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: RoundContext) -> Mapping[str, float]:
        return self._slot("fedcore_evaluate", model=model, dataset=dataset, clients=clients, states=states, ctx=ctx)

    def fedcore_train_cohort(self, *, jobs: Sequence[ClientJob], ctx: RoundContext
                             ) -> Sequence[ClientUpdate | ClientFailed]:
        return self._slot("fedcore_train_cohort", jobs=jobs, ctx=ctx)

    # -- observers (every implementation runs, in pipeline order) ----------------------------

    def fedcore_check_pipeline(self, *, pipeline: Pipeline) -> None:
        self._pm.hook.fedcore_check_pipeline(pipeline=pipeline)

    def fedcore_run_start(self, *, run: RunContext) -> None:
        self._pm.hook.fedcore_run_start(run=run)

    def fedcore_round_start(self, *, ctx: RoundContext) -> None:
        self._pm.hook.fedcore_round_start(ctx=ctx)

    def fedcore_client_trained(self, *, client: ClientInfo, outcome: ClientUpdate | ClientFailed, ctx: RoundContext
                               ) -> None:
        self._pm.hook.fedcore_client_trained(client=client, outcome=outcome, ctx=ctx)

    def fedcore_client_done(self, *, client: ClientInfo, update: ClientUpdate, ctx: RoundContext) -> None:
        self._pm.hook.fedcore_client_done(client=client, update=update, ctx=ctx)

    def fedcore_adapt_update(self, *, update: ClientUpdate, model: nn.Module, ctx: RoundContext
                             ) -> ClientUpdate | DropUpdate | None:
        """The first component's answer for a stale update (``None``: nobody adapts it)."""
        answer = self._pm.hook.fedcore_adapt_update(update=update, model=model, ctx=ctx)
        if answer is not None and not isinstance(answer, (ClientUpdate, DropUpdate)):
            raise TypeError(f"fedcore_adapt_update returned {answer!r}; expected a ClientUpdate, a DropUpdate or None")
        return answer

    def fedcore_plan_job(self, *, client: ClientInfo, share: Share, samples: int, example: torch.Tensor,
                         ctx: RoundContext) -> JobPlan | None:
        """The first component's plan of a client's job (``None``: nobody answers; the dry run's default)."""
        answer = self._pm.hook.fedcore_plan_job(client=client, share=share, samples=samples, example=example,
                                                ctx=ctx)
        if answer is not None and not isinstance(answer, JobPlan):
            raise TypeError(f"fedcore_plan_job returned {answer!r}; expected a fedcore.types.JobPlan or None")
        return answer

    def fedcore_collect_metrics(self, *, ctx: RoundContext) -> dict[str, float]:
        """Every contribution (after any wrappers), merged in pipeline order; a key given twice is an error."""
        hook = self._pm.hook.fedcore_collect_metrics
        contributions = hook(ctx=ctx)
        # pluggy returns the non-None results in call order: observers in reverse registration order
        observers = [self._pipeline.name_of(i.plugin) for i in reversed(hook.get_hookimpls())
                     if not (i.wrapper or i.hookwrapper)]
        merged: dict[str, float] = {}
        owner: dict[str, int] = {}
        for position, metrics in enumerate(contributions):
            for key, value in metrics.items():
                if key in merged:
                    if len(contributions) == len(observers):
                        raise ValueError(f"metric {key!r} is contributed by both {observers[owner[key]]} and "
                                         f"{observers[position]}")
                    raise ValueError(f"metric {key!r} is contributed twice, by two of: {', '.join(observers)} "
                                     f"(an observer that returns None cannot be told apart; return {{}} instead)")
                merged[key], owner[key] = float(value), position
        return merged

    def fedcore_round_end(self, *, ctx: RoundContext, record: Mapping[str, Any]) -> None:
        self._pm.hook.fedcore_round_end(ctx=ctx, record=record)

    def fedcore_run_end(self, *, run: RunContext, history: Sequence[Mapping[str, Any]]) -> None:
        self._pm.hook.fedcore_run_end(run=run, history=history)


_NOT_FOUND = object()
_HOOK_MARKERS: dict[tuple[type, str], tuple[Any, Any]] = {}
"""(component class, attribute name) -> (the class attribute, its hook options): what pluggy found last time."""


class _PluginManager(pluggy.PluginManager):
    """pluggy's manager, reading each component class's hook markers once per process instead of once per
    registration: ``register`` looks at every name of ``dir(component)`` with ``inspect.getattr_static`` (about
    30 ms a pipeline, as much as a tiny run's rounds). The cached answer is used only while the class still holds
    the same attribute object (a monkeypatched method is read afresh) and the instance has no attribute of that
    name; modules and classes registered as plugins always take pluggy's own path. A property is never a hook and
    is never asked about: pluggy 1.5 and 1.6 (which fedcore supports) evaluate it with ``getattr``, and a property
    that raises (SA-FedLoRA's ``rank_schedule`` before the model is known) broke the pipeline's construction on
    the first GPU machine, whose pluggy was older than the development environment's 1.7."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if name[:2] == "__" and name[-2:] == "__":  # Python's and attrs' names, ~80 % of a component's dir(): never
            return None                            # a hook (pytest skips every name without its prefix)
        cls = type(plugin)
        if isinstance(plugin, type) or cls.__module__ == "builtins" or name in getattr(plugin, "__dict__", ()):
            return super().parse_hookimpl_opts(plugin, name)
        held = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), _NOT_FOUND)  # runs no descriptor
        if isinstance(held, (property, cached_property)):  # never a hook; pluggy < 1.7 would evaluate it
            return None
        known = _HOOK_MARKERS.get((cls, name))
        if known is not None and known[0] is held:
            return known[1]
        opts = super().parse_hookimpl_opts(plugin, name)
        _HOOK_MARKERS[(cls, name)] = (held, opts)
        return opts


class Pipeline:
    """One component per slot, plus wrappers and observers, on a fresh PluginManager."""

    def __init__(self, plugins: Sequence[Any] = (), *, defaults: bool = True) -> None:
        plugins = list(plugins)
        for p in plugins:
            if isinstance(p, type):
                raise TypeError(f"Pipeline takes component instances; got the class {p.__name__}. "
                                f"Have you forgotten the `()`? Use {p.__name__}()")
        ids = [id(p) for p in plugins]
        if len(set(ids)) != len(ids):
            raise ConfigError("the same component object is listed twice in the pipeline")
        self._given = plugins
        self._use_defaults = defaults
        pm = _PluginManager("fedcore")
        pm.add_hookspecs(hookspecs)
        # historic: a component's fedcore_addhooks runs as it registers, before check_pending sees its new hooks
        pm.hook.fedcore_addhooks.call_historic(kwargs={"pluginmanager": pm})
        self._names: dict[int, str] = {}
        for i, plugin in reversed(list(enumerate(plugins))):  # pluggy is LIFO: register in reverse
            name = f"{i}:{type(plugin).__name__}"
            self._names[id(plugin)] = name
            try:
                pm.register(plugin, name=name)
            except pluggy.PluginValidationError as exc:
                raise ConfigError(f"{type(plugin).__name__} does not fit the hook specifications: {exc}") from None
        self._defaults: dict[str, Any] = {}
        if defaults:
            for slot, factory in _default_providers().items():
                hook = getattr(pm.hook, SLOT_HOOKS[slot])
                if not any(not impl.wrapper and not impl.hookwrapper for impl in hook.get_hookimpls()):
                    component = factory()
                    self._defaults[slot] = component
                    self._names[id(component)] = f"default:{type(component).__name__}"
                    # defaults register first so they sit innermost, below any wrapper
                    pm.register(component, name=self._names[id(component)])
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise ConfigError(f"unknown hook name (a typo?): {exc}") from None
        self._pm = pm
        self._validate()
        self.hooks = Hooks(pm, self)
        check_uploads(self)  # the aggregator merges what the share and the local update upload (fedcore.uploads)
        self.hooks.fedcore_check_pipeline(pipeline=self)  # components refuse combinations they cannot run
        if os.environ.get("FEDCORE_TRACE_HOOKS", "").strip() not in ("", "0"):
            pm.trace.root.setwriter(sys.stderr.write)
            pm.enable_tracing()

    # -- validation -----------------------------------------------------------------------

    def _validate(self) -> None:
        for slot, hook in SLOT_HOOKS.items():
            impls = getattr(self._pm.hook, hook).get_hookimpls()
            for impl in impls:
                if impl.hookwrapper:
                    raise ConfigError(f"{self.name_of(impl.plugin)} uses an old-style hookwrapper on {hook}; "
                                      f"use @fedcore.hookimpl(wrapper=True)")
            providers = [i for i in impls if not i.wrapper]
            for impl in providers:
                if impl.tryfirst or impl.trylast:
                    raise ConfigError(f"{self.name_of(impl.plugin)} provides slot {slot!r} with tryfirst/trylast; "
                                      f"ordering flags are for wrappers and observers only")
            if len(providers) > 1:
                names = ", ".join(self._describe_source(i.plugin) for i in reversed(providers))
                raise SlotConflictError(f"slot {slot!r} is provided by more than one component: {names}")
            if not providers:
                raise MissingSlotError(f"slot {slot!r} ({hook}) has no provider")

    def _describe_source(self, plugin: Any) -> str:
        entry = catalogue.registry().find(plugin)
        label = entry.name if entry else type(plugin).__name__
        dist, version = _distribution_of(type(plugin).__module__)
        return f"{label} ({dist} {version})" if dist else label

    # -- introspection --------------------------------------------------------------------

    def name_of(self, plugin: Any) -> str:
        return self._names.get(id(plugin), type(plugin).__name__)

    @property
    def components(self) -> list[Any]:
        """The components as given, then the defaults that filled empty slots."""
        return list(self._given) + list(self._defaults.values())

    def provider(self, slot: str) -> Any:
        if slot not in SLOT_HOOKS:
            raise ConfigError(f"unknown slot {slot!r}; choose one of: {', '.join(SLOT_HOOKS)}")
        impls = getattr(self._pm.hook, SLOT_HOOKS[slot]).get_hookimpls()
        return next(i.plugin for i in impls if not i.wrapper)

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        return self._pm

    def describe(self) -> dict[str, Any]:
        """A manifest: each component's registered name, class, role, settings, distribution and version."""
        rows = []
        for component in self.components:
            provides, wraps, observes = slots_of(component)
            entry = catalogue.registry().find(component)
            dist, version = _distribution_of(type(component).__module__)
            rows.append({
                "name": entry.name if entry else None,
                "class": f"{type(component).__module__}.{type(component).__qualname__}",
                "provides": provides, "wraps": wraps, "observes": observes,
                "default": any(component is d for d in self._defaults.values()),
                "settings": settings_of(component),
                "distribution": dist, "version": version,
            })
        slots = {}
        for slot in SLOT_HOOKS:
            p = self.provider(slot)
            entry = catalogue.registry().find(p)
            slots[slot] = entry.name if entry else type(p).__qualname__
        from fedcore import __version__  # the package's own attribute: fedcore/__init__ imports this module

        return {"fedcore_version": __version__, "slots": slots, "components": rows}

    # -- composition ----------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Pipeline:
        """Build from names: ``{"partition": {"name": "dirichlet", "alpha": 0.5}, "aggregate": "fedavg",
        "plugins": [{"name": "trimmed-mean", "trim": 0.1}]}``.

        ``{"recipe": "fedv", "aggregate": "trimmed-mean"}`` starts from a registered recipe
        (:mod:`fedcore.recipes`) and replaces or patches the slots named beside it.

        Slot keys take one component that must provide that slot; ``plugins`` takes any others
        (wrappers, observers, components filling several slots), in call order.
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"pipeline config must be a table/dict, got {type(config).__name__}")
        if config.get("recipe") is not None:  # a method's preset; the other keys replace or patch its slots
            from fedcore.recipes import get_recipe

            name = config["recipe"]
            if not isinstance(name, str):
                raise ConfigError(f"recipe = {name!r}; expected a recipe name (fedcore plugins lists them)")
            config = get_recipe(name).config({k: v for k, v in config.items() if k != "recipe"})
        allowed = list(SLOT_HOOKS) + ["plugins", "recipe"]
        unknown = sorted(set(config) - set(allowed))
        if unknown:
            raise ConfigError(f"unknown pipeline key(s) {unknown}; allowed: {', '.join(allowed)}")
        components = [component_from_spec(spec, where="plugins") for spec in config.get("plugins", [])]
        for slot in SLOT_HOOKS:
            if slot in config:
                component = component_from_spec(config[slot], where=slot)
                if slot not in slots_of(component)[0]:
                    raise ConfigError(f"{slot} = {type(component).__name__} does not provide the {slot!r} slot "
                                      f"(it provides: {', '.join(slots_of(component)[0]) or 'nothing'})")
                components.append(component)
        return cls(components)

    def replace(self, **slots: Any) -> Pipeline:
        """A new pipeline with the provider of each named slot swapped: ``pipe.replace(aggregate=TrimmedMean())``."""
        components = list(self._given)
        for slot, new in slots.items():
            old = self.provider(slot)
            if slot not in slots_of(new)[0]:
                raise ConfigError(f"replace({slot}=...): {type(new).__name__} does not provide {slot!r}")
            components = [new if c is old else c for c in components]
            if new not in components:
                components.append(new)
        return Pipeline(components, defaults=self._use_defaults)

    def __reduce__(self) -> tuple[Any, ...]:  # rebuild on a worker from the (picklable, frozen) components
        return (Pipeline, (self._given,), None, None, None)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(f'{s}={type(self.provider(s)).__name__}' for s in SLOT_HOOKS)})"

    # -- running --------------------------------------------------------------------------

    def run(self, *, model: Any, train: Any, test: Any = None, num_clients: int, rounds: int, seed: int = 0,
            eval_every: int = 1, executor: Any = None, clock: Any = None, profiles: Sequence[str | None] | None = None,
            out_dir: Any = None, on_round: Any = None, faults: Any = None, checkpoint: Any = None,
            device: Any = None, precision: str = "fp32", client_metrics: bool = False,
            update_norm_bound: float = 0.0) -> RunResult:
        """Run the pipeline; returns a :class:`fedcore.engine.history.RunResult`. ``model`` is trained in place.

        ``clock`` (``fedcore.runtime.SimClock``) gives every job virtual time on its client's device
        profile; ``profiles`` names each client's profile (a list, or a seeded
        ``fedcore.runtime.ProfileAssignment``); ``faults`` (``fedcore.runtime.Faults``) injects seeded
        dropouts and lost uploads. ``executor`` runs client work (inline by default, or
        ``fedcore.engine.ray_executor.RayExecutor``). ``checkpoint``
        (``fedcore.engine.checkpoint.Checkpointer(dir, every=1, resume=...)``) saves every k rounds and resumes.
        ``device`` (``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"``; ``None``: where the model is) and
        ``precision`` (``"fp32" | "bf16" | "fp16"``) place the model and data once and set client training's
        arithmetic (docs/runtime.md, "Devices and precision"). ``client_metrics``: each history row also lists every
        aggregated update's metrics (``client_metrics``; the per-round ``client_<m>`` columns are always there).
        """
        from fedcore.engine.loop import Engine
        from fedcore.engine.spec import RunSpec

        spec = RunSpec(model=model, train=train, test=test, num_clients=num_clients, rounds=rounds, seed=seed,
                       eval_every=eval_every, executor=executor, clock=clock, profiles=profiles, out_dir=out_dir,
                       on_round=on_round, faults=faults, checkpoint=checkpoint, device=device, precision=precision,
                       client_metrics=client_metrics, update_norm_bound=update_norm_bound)
        return Engine(self, spec).run()


def component_from_spec(spec: Any, *, where: str) -> Any:
    """A component from ``"name"``, ``{"name": ..., **settings}`` or an instance."""
    slot = where if where in SLOT_HOOKS else None  # an unknown name then lists only that slot's providers
    if isinstance(spec, str):
        return build(catalogue.get(spec, slot=slot), {}, name=spec)
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise ConfigError(f"{where}: a component table needs a 'name' key, got keys {sorted(spec)}")
        settings = {k: v for k, v in spec.items() if k != "name"}
        return build(catalogue.get(spec["name"], slot=slot), settings, name=f"{where}.{spec['name']}")
    if attrs.has(type(spec)) or hasattr(spec, "__dict__"):
        return spec
    raise ConfigError(f"{where}: expected a component name, a table with 'name', or a component; got {spec!r}")
