"""Recipes: a method as a named preset of single-slot components, each slot replaceable.

A method never fills several slots with one object. It ships single-slot components and a recipe that
names them, so a user swaps any one of them by name (robust aggregation under split learning, a
server optimizer over LoRA factors) without touching the rest::

    pipe = fedcore.recipe("fedv", aggregate="trimmed-mean")             # Python
    pipe = fedcore.recipe("fedv", split={"cut": 2})                     # patch one component's settings

    recipe = "fedv"                                                     # TOML (experiment config)
    [pipeline.aggregate]
    name = "trimmed-mean"

An override of a slot is a component name, a table with ``name`` (replace the component), a table
without ``name`` (keep the recipe's component, change some of its settings) or a component instance.
``plugins`` (wrappers and observers) are the recipe's, then the ones given, in call order; a given plugin
named like one of the recipe's changes that one's settings instead (``plugins = [{name = "sa-fedlora-plan",
r_a = 4}]``).

``test_setup`` declares the smallest experiment a recipe runs on (a prompt method needs a prompted CLIP and a
data set with class names; most run on :data:`MICRO_SETUP`). The recipe matrix
(``python -m fedcore.experiment.matrix``, ``tests/test_recipe_matrix.py``) runs every installed recipe under
every scheduler on it, so a new recipe is covered without naming it anywhere.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.hookspecs import SLOT_HOOKS

ComponentSpec = str | Mapping[str, Any]

MICRO_SETUP: Mapping[str, Any] = {
    "dataset": {"name": "synthetic", "n": 256, "n_test": 32, "num_classes": 4},
    "model": {"name": "tiny-mlp"},
    "num_clients": 4,
}
"""The experiment keys a recipe's ``test_setup`` leaves out: 256 Gaussian-blob samples (64 a client: two local steps of
32), a tiny MLP, 4 clients."""


def _as_dict(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


def _check_spec(spec: Any, where: str) -> None:
    if isinstance(spec, str):
        return
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        return
    raise ConfigError(f"{where}: a recipe names a component as \"name\" or {{name = \"...\", settings...}}; "
                      f"got {spec!r}")


def _as_specs(value: Iterable[ComponentSpec]) -> tuple[ComponentSpec, ...]:
    """``tuple`` as a typed converter (mypy's attrs plugin cannot bind ``tuple``'s type variable)."""
    return tuple(value)


def _freeze_slots(value: Mapping[str, Any]) -> dict[str, Any]:
    return {slot: spec if isinstance(spec, str) else dict(spec) for slot, spec in dict(value).items()}


@attrs.frozen(kw_only=True)
class Recipe:
    """A named preset pipeline: ``slots`` maps slot names to component specs; ``plugins`` are wrappers/observers.

    Slots the recipe leaves out get the built-in defaults, as in any pipeline. ``help`` is the one-line
    description ``fedcore plugins`` and ``fedcore describe`` show.
    """

    slots: Mapping[str, ComponentSpec] = attrs.field(converter=_freeze_slots)
    plugins: tuple[ComponentSpec, ...] = attrs.field(default=(), converter=_as_specs)
    help: str = ""
    test_setup: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)
    """Top-level experiment keys (``dataset``, ``model``, ``num_clients``, ``pipeline`` patches, ...) of a micro
    run of this recipe, over :data:`MICRO_SETUP`: what the recipe matrix and smoke tests run it on."""
    learning: Mapping[str, Any] = attrs.field(factory=dict, converter=_as_dict)
    """The recipe's micro learning setup (``fedcore.experiment.learning``): ``rounds``, ``margin`` (accuracy above
    the better of chance and the control), ``setup`` (experiment keys over :meth:`micro_config`; ``pipeline``
    patches merge slot by slot), ``chance`` (when the test set's majority share is not it, as for a personalised
    evaluation), ``control`` (also run it with a no-op local update and beat that: a model that starts above
    chance), ``slow`` (the integration tier). Unset keys take :data:`LEARNING_DEFAULTS`."""

    def __attrs_post_init__(self) -> None:
        unknown = sorted(set(self.slots) - set(SLOT_HOOKS))
        if unknown:
            raise ConfigError(f"recipe slot(s) {unknown} unknown; slots are: {', '.join(SLOT_HOOKS)}")
        for slot, spec in self.slots.items():
            _check_spec(spec, f"recipe slot {slot!r}")
        for i, spec in enumerate(self.plugins):
            _check_spec(spec, f"recipe plugins[{i}]")
        unknown_setup = sorted(set(self.test_setup) - _SETUP_KEYS)
        if unknown_setup:
            raise ConfigError(f"recipe test_setup key(s) {unknown_setup} unknown; "
                              f"allowed: {', '.join(sorted(_SETUP_KEYS))}")
        unknown_learning = sorted(set(self.learning) - set(LEARNING_DEFAULTS) - {"setup", "chance"})
        if unknown_learning:
            raise ConfigError(f"recipe learning key(s) {unknown_learning} unknown; allowed: "
                              f"{', '.join(sorted({*LEARNING_DEFAULTS, 'setup', 'chance'}))}")
        unknown_setup = sorted(set(self.learning.get("setup", {})) - _SETUP_KEYS)
        if unknown_setup:
            raise ConfigError(f"recipe learning setup key(s) {unknown_setup} unknown; "
                              f"allowed: {', '.join(sorted(_SETUP_KEYS))}")

    def micro_config(self) -> dict[str, Any]:
        """The experiment config keys of this recipe's micro run: :data:`MICRO_SETUP` updated by ``test_setup``."""
        return {**{k: _copy(v) for k, v in MICRO_SETUP.items()}, **{k: _copy(v) for k, v in self.test_setup.items()}}

    def learning_config(self) -> dict[str, Any]:
        """The experiment config keys of this recipe's learning check: :meth:`micro_config` with the learning
        ``setup`` applied (top-level keys replaced; ``pipeline`` patches merged slot by slot)."""
        config = self.micro_config()
        for key, value in self.learning.get("setup", {}).items():
            if key == "pipeline":
                pipeline = dict(config.get("pipeline", {}))
                for slot, patch in dict(value).items():
                    old = pipeline.get(slot)
                    if isinstance(old, Mapping) and isinstance(patch, Mapping) and "name" not in patch:
                        pipeline[slot] = {**old, **_copy(patch)}
                    else:
                        pipeline[slot] = _copy(patch)
                config["pipeline"] = pipeline
            else:
                config[key] = _copy(value)
        return config

    def learning_settings(self) -> dict[str, Any]:
        """``rounds``, ``margin``, ``control``, ``slow`` (declared or :data:`LEARNING_DEFAULTS`) and ``chance``."""
        return {**LEARNING_DEFAULTS, "chance": None,
                **{k: v for k, v in self.learning.items() if k != "setup"}}

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The pipeline config (as for :meth:`fedcore.Pipeline.from_config`) with ``overrides`` applied."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(SLOT_HOOKS) - {"plugins"})
        if unknown:
            raise ConfigError(f"unknown pipeline key(s) {unknown}; allowed: {', '.join([*SLOT_HOOKS, 'plugins'])}")
        config: dict[str, Any] = {slot: _copy(spec) for slot, spec in self.slots.items()}
        for slot in SLOT_HOOKS:
            if slot not in overrides:
                continue
            new = overrides[slot]
            if isinstance(new, Mapping) and "name" not in new:  # patch the recipe's component settings
                if slot not in config:
                    raise ConfigError(f"pipeline.{slot}: the recipe has no {slot!r} component to change settings "
                                      f"of; name one with name = \"...\"")
                base = config[slot]
                base = {"name": base} if isinstance(base, str) else dict(base)
                config[slot] = {**base, **dict(new)}
            else:
                config[slot] = new
        extra = overrides.get("plugins", [])
        if not isinstance(extra, Sequence) or isinstance(extra, (str, bytes)):
            raise ConfigError(f"pipeline.plugins must be a list of components, got {extra!r}")
        plugins = [_copy(p) for p in self.plugins]
        for spec in extra:  # naming one of the recipe's plugins again changes its settings
            same = [i for i, p in enumerate(plugins) if _name(p) is not None and _name(p) == _name(spec)]
            if same and isinstance(spec, (str, Mapping)):
                old = plugins[same[0]]
                plugins[same[0]] = {**({"name": old} if isinstance(old, str) else old),
                                    **({"name": spec} if isinstance(spec, str) else dict(spec))}
            else:
                plugins.append(spec)
        if plugins:
            config["plugins"] = plugins
        return config

    def describe(self) -> dict[str, Any]:
        """Plain data: the slots and plugins the recipe names (for ``fedcore describe``)."""
        return {"slots": {s: _copy(v) for s, v in self.slots.items()}, "plugins": [_copy(p) for p in self.plugins],
                "help": self.help, "test_setup": self.micro_config()}


_SETUP_KEYS = {"dataset", "model", "num_clients", "pipeline", "eval_every"}

LEARNING_DEFAULTS: Mapping[str, Any] = {"rounds": 5, "margin": 0.1, "control": False, "slow": False}
"""A recipe that declares no learning setup is checked on its micro setup for 5 rounds, 10 points above chance."""


def _name(spec: Any) -> str | None:
    if isinstance(spec, str):
        return spec
    return spec.get("name") if isinstance(spec, Mapping) else None


def _copy(spec: Any) -> Any:
    return dict(spec) if isinstance(spec, Mapping) else spec


def recipe(name: str, /, **overrides: Any) -> Any:
    """The pipeline of the recipe registered as ``name``, with slots replaced or patched by ``overrides``.

    ``fedcore.recipe("fedv", aggregate="trimmed-mean")``; ``fedcore.recipe("sa-fedlora", split={"r_a": 12})``.
    """
    from fedcore.pipeline import Pipeline

    return Pipeline.from_config({"recipe": name, **overrides})


def get_recipe(name: str) -> Recipe:
    """The :class:`Recipe` registered as ``name`` (an unknown name lists the installed recipes)."""
    from fedcore import plugins

    obj = plugins.lookup(name, kind="recipe").obj
    if not isinstance(obj, Recipe):  # pragma: no cover - the registry only accepts Recipe objects
        raise ConfigError(f"recipe {name!r} is registered as {obj!r}, not a Recipe")
    return obj
