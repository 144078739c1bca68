"""Pipeline: exactly the components it is given, one provider per slot, on its own PluginManager.

    pipe = fedcore.Pipeline([DirichletPartition(alpha=0.5), SGDUpdate(lr=0.05), FedAvg()])
    result = pipe.run(model=model, train=train, test=test, num_clients=10, rounds=5, seed=0)

List order is call order for wrappers and observers (the first listed wraps outermost). A slot
without a provider gets the built-in default. Two providers, a provider with ordering flags, an
old-style ``hookwrapper`` or a class passed instead of an instance are errors.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
import os
import sys
from typing import Any

import attrs
import pluggy

import fedcore
from fedcore import hookspecs
from fedcore.errors import ConfigError, MissingSlotError, SlotConflictError
from fedcore.hookspecs import SLOT_HOOKS
from fedcore.registry import slots_of
from fedcore.settings import build, settings_of


def _default_providers() -> dict[str, Any]:
    from fedcore.builtin import defaults

    return defaults.DEFAULTS


@lru_cache(maxsize=None)
def _distribution_of(module: str) -> tuple[str | None, str | None]:
    top = module.split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None, None


class Hooks:
    """Typed facade over the pipeline's hooks (tox's idea): a slot that returns ``None`` is an error."""

    def __init__(self, pm: pluggy.PluginManager, pipeline: Pipeline) -> None:
        self._pm = pm
        self._pipeline = pipeline
        for hook in SLOT_HOOKS.values():
            setattr(self, hook, self._slot(hook))
        for hook in hookspecs.OBSERVER_HOOKS:
            if hook != "fedcore_collect_metrics":
                setattr(self, hook, getattr(pm.hook, hook))

    def _slot(self, hook: str):
        caller = getattr(self._pm.hook, hook)

        def call(**kwargs: Any) -> Any:
            result = caller(**kwargs)
            if result is None:
                providers = [self._pipeline.name_of(i.plugin) for i in caller.get_hookimpls() if not i.wrapper]
                raise MissingSlotError(f"{hook} returned None (provider: {', '.join(providers) or 'none'})")
            return result

        call.__name__ = hook
        return call

    def collect_metrics(self, **kwargs: Any) -> dict[str, float]:
        """Call every ``fedcore_collect_metrics`` in pipeline order and merge; duplicate keys are errors."""
        merged: dict[str, float] = {}
        owner: dict[str, str] = {}
        for impl in reversed(self._pm.hook.fedcore_collect_metrics.get_hookimpls()):
            out = impl.function(**{a: kwargs[a] for a in impl.argnames})
            for k, v in (out or {}).items():
                name = self._pipeline.name_of(impl.plugin)
                if k in merged:
                    raise ValueError(f"metric {k!r} is contributed by both {owner[k]} and {name}")
                merged[k], owner[k] = float(v), name
        return merged


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
        pm = pluggy.PluginManager("fedcore")
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
        entry = fedcore.plugins.registry().find(plugin)
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
            entry = fedcore.plugins.registry().find(component)
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
            entry = fedcore.plugins.registry().find(p)
            slots[slot] = entry.name if entry else type(p).__qualname__
        return {"fedcore_version": fedcore.__version__, "slots": slots, "components": rows}

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

    def __reduce__(self):  # rebuild on a worker from the (picklable, frozen) components
        return (Pipeline, (self._given,), None, None, None)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(f'{s}={type(self.provider(s)).__name__}' for s in SLOT_HOOKS)})"

    # -- running --------------------------------------------------------------------------

    def run(self, *, model: Any, train: Any, test: Any = None, num_clients: int, rounds: int, seed: int = 0,
            eval_every: int = 1, executor: Any = None, clock: Any = None, profiles: Sequence[str | None] | None = None,
            out_dir: Any = None, on_round: Any = None, faults: Any = None, checkpoint: Any = None):
        """Run the pipeline; returns a :class:`fedcore.engine.history.RunResult`. ``model`` is trained in place.

        ``clock`` (``fedcore.runtime.SimClock``) gives every job virtual time on its client's device
        profile; ``profiles`` names each client's profile (a list, or a seeded
        ``fedcore.runtime.ProfileAssignment``); ``faults`` (``fedcore.runtime.Faults``) injects seeded
        dropouts and lost uploads. ``executor`` runs client work (inline by default, or
        ``fedcore.engine.ray_executor.RayExecutor``). ``checkpoint``
        (``fedcore.engine.checkpoint.Checkpointer(dir, every=1, resume=...)``) saves every k rounds and resumes.
        """
        from fedcore.engine.loop import Engine

        engine = Engine(self, model=model, train=train, test=test, num_clients=num_clients, rounds=rounds, seed=seed,
                        eval_every=eval_every, executor=executor, clock=clock, profiles=profiles, out_dir=out_dir,
                        on_round=on_round, faults=faults, checkpoint=checkpoint)
        return engine.run()


def component_from_spec(spec: Any, *, where: str) -> Any:
    """A component from ``"name"``, ``{"name": ..., **settings}`` or an instance."""
    if isinstance(spec, str):
        return build(fedcore.plugins.get(spec), {}, name=spec)
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise ConfigError(f"{where}: a component table needs a 'name' key, got keys {sorted(spec)}")
        settings = {k: v for k, v in spec.items() if k != "name"}
        return build(fedcore.plugins.get(spec["name"]), settings, name=f"{where}.{spec['name']}")
    if attrs.has(type(spec)) or hasattr(spec, "__dict__"):
        return spec
    raise ConfigError(f"{where}: expected a component name, a table with 'name', or a component; got {spec!r}")
