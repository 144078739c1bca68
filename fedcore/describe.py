"""What a registered name is and how to configure it: the data behind ``fedcore describe NAME``.

    >>> info = describe_name("fedavg")
    >>> info["kind"], info["slots"], info["settings"][0]["name"]
    ('component', ['aggregate'], 'weighting')

One plain dict per name (JSON-ready), the same shape for every kind, so a new kind adds fields rather
than a new format: a component lists the slots it provides, a recipe (a named preset pipeline) will
list ``slots`` as ``{slot: component}`` instead of a list.
"""
from __future__ import annotations

import inspect
from typing import Any

from fedcore.errors import UnknownComponentError
from fedcore.first_party import PACKAGES
import fedcore.plugins
from fedcore.registry import KINDS, Entry, slots_of
from fedcore.settings import describe_settings


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
    elif entry.kind == "table":
        out["doc"] = obj.key.help
        out["value"] = " or ".join(k.__name__ for k in obj.key.kind)
        if obj.settings:
            from fedcore.experiment.build import load_object

            out["settings"] = describe_settings(load_object(obj.settings))
    return out


def describe_name(name: str) -> dict[str, Any]:
    """The description of ``name``; a name registered as two kinds (a component and a model) gives the
    component and lists the others under ``also``."""
    first, *others = find(name)
    out = describe_entry(first)
    out["also"] = [describe_entry(e) for e in others]
    return out
