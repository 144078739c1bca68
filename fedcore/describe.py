"""What a registered name is and how to configure it: the data behind ``fedcore describe NAME``.

    >>> info = describe_name("fedavg")
    >>> info["kind"], info["slots"], info["settings"][0]["name"]
    ('component', ['aggregate'], 'weighting')

One plain dict per name (JSON-ready), the same shape for every kind, so a new kind adds fields rather
than a new format: a component lists the slots it provides; a recipe (a named preset pipeline) lists
``slots`` as ``{slot: component}`` and, under ``components``, each component with its settings as the
recipe sets them:

    >>> info = describe_name("fedprox")
    >>> info["slots"]["local_update"], [r["value"] for r in info["components"][2]["settings"] if r["name"] == "mu"]
    ('sgd', [0.01])
"""
from __future__ import annotations

import inspect
from typing import Any

from fedcore.errors import UnknownComponentError
from fedcore.first_party import PACKAGES
import fedcore.plugins
from fedcore.registry import KINDS, Entry, slots_of
from fedcore.settings import describe_settings

LORA_ROW: dict[str, Any] = {
    "name": "lora", "type": "table", "required": False, "default": None, "allowed": "r, alpha, target_modules, dropout",
    "help": "model.lora: peft LoRA settings the model carries to the component that injects the adapters "
            "(lora-share, sa-fedlora-plan); see docs/models.md"}
"""Every model takes ``[model.lora]`` (the config builder reads it, not the factory): one row for all of them."""


def find(name: str) -> list[Entry]:
    """Every entry called ``name`` (one per kind at most). An unknown name raises one line: a first-party
    package to install, or the names there are."""
    registry = fedcore.plugins.registry()
    found = []
    for kind in KINDS:
        try:
            found.append(registry.get(name, kind))
        except UnknownComponentError:
            continue
    if found:
        return found
    if name in PACKAGES:
        fedcore.plugins.lookup(name)  # raises: not installed, not loaded, or its plugin failed to import
    every = sorted({e.name for e in registry.entries()})
    raise UnknownComponentError(name, every, kind="name")


def describe_entry(entry: Entry) -> dict[str, Any]:
    """The description of one registry entry."""
    obj = entry.obj
    out: dict[str, Any] = {
        "name": entry.name, "kind": entry.kind, "plugin": entry.plugin, "distribution": entry.distribution,
        "version": entry.version, "summary": entry.help, "doc": inspect.cleandoc(getattr(obj, "__doc__", "") or ""),
        "slots": [], "wraps": [], "observes": [], "settings": [],
    }
    if entry.kind == "component":
        out["slots"], out["wraps"], out["observes"] = slots_of(obj)
        out["settings"] = describe_settings(obj)
    elif entry.kind in ("dataset", "model", "executor"):
        out["settings"] = describe_settings(obj)
        if entry.kind == "model":
            out["settings"].append(LORA_ROW)
    elif entry.kind == "recipe":
        recipe = obj.describe()
        out["doc"] = entry.help
        out["slots"] = {slot: _spec_name(spec) for slot, spec in recipe["slots"].items()}
        out["components"] = [describe_part(slot, spec) for slot, spec in recipe["slots"].items()]
        out["components"] += [describe_part("plugins", spec) for spec in recipe["plugins"]]
        out["test_setup"] = recipe["test_setup"]
    elif entry.kind == "table":
        out["doc"] = obj.key.help
        out["value"] = " or ".join(k.__name__ for k in obj.key.kind)
        if obj.settings:
            from fedcore.experiment.build import load_object

            out["settings"] = describe_settings(load_object(obj.settings))
    return out


def _spec_name(spec: Any) -> str:
    return spec if isinstance(spec, str) else str(spec["name"])


def describe_part(slot: str, spec: Any) -> dict[str, Any]:
    """One component a recipe names: its slot, name, package, and every setting with the value the recipe gives
    it (``value``; the component's default where the recipe sets none, ``set_by_recipe`` says which)."""
    name = _spec_name(spec)
    given = {} if isinstance(spec, str) else {k: v for k, v in spec.items() if k != "name"}
    entry = fedcore.plugins.lookup(name)
    settings = []
    for row in describe_settings(entry.obj):
        row = dict(row, set_by_recipe=row["name"] in given)
        row["value"] = given[row["name"]] if row["set_by_recipe"] else row["default"]
        settings.append(row)
    return {"slot": slot, "name": name, "summary": entry.help, "distribution": entry.distribution,
            "version": entry.version, "settings": settings}


def describe_name(name: str) -> dict[str, Any]:
    """The description of ``name``; a name registered as two kinds (a component and a model) gives the
    component and lists the others under ``also``."""
    first, *others = find(name)
    out = describe_entry(first)
    out["also"] = [describe_entry(e) for e in others]
    return out
