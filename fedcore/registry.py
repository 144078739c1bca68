"""The name -> component registry that plugins fill through ``fedcore_register_components``.

Like hatch's ``ClassRegister`` and conda's plugin manager: names are lower-case and unique, a clash
is an error naming both sources, and an unknown name lists the choices.
"""
from __future__ import annotations

from collections.abc import Callable
import re
from typing import Any

import attrs

from fedcore.errors import PluginConflictError, UnknownComponentError
from fedcore.hookspecs import SLOT_HOOKS

KINDS = ("component", "dataset", "model", "executor", "table", "recipe")
"""What a name can be: a pipeline component, a dataset or model factory, an executor class, a config table,
a method's recipe (a preset of single-slot components)."""
_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")


def _first_line(doc: str | None) -> str:
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""


def slots_of(obj: Any) -> tuple[list[str], list[str], list[str]]:
    """(slots it provides, slots it wraps, observer hooks it implements), inferred from its hookimpls."""
    provides: list[str] = []
    wraps: list[str] = []
    observes: list[str] = []
    hook_to_slot = {v: k for k, v in SLOT_HOOKS.items()}
    cls = obj if isinstance(obj, type) else type(obj)
    for attr in dir(cls):
        if not attr.startswith("fedcore_"):
            continue
        fn = getattr(cls, attr, None)
        opts = getattr(fn, "fedcore_impl", None)
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        if hook in hook_to_slot:
            (wraps if opts.get("wrapper") or opts.get("hookwrapper") else provides).append(hook_to_slot[hook])
        else:
            observes.append(hook)
    return provides, wraps, observes


@attrs.frozen(kw_only=True)
class Entry:
    name: str
    obj: Any = attrs.field(eq=False)
    kind: str
    plugin: str
    distribution: str | None = None
    version: str | None = None
    help: str = ""

    @property
    def slots(self) -> list[str]:
        return slots_of(self.obj)[0] if self.kind == "component" else []

    @property
    def source(self) -> str:
        if self.distribution:
            return f"{self.plugin} ({self.distribution} {self.version})"
        return self.plugin


class ComponentRegistry:
    """Named components (hook-bearing classes), datasets and models from every loaded plugin."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        self._source: tuple[str, str | None, str | None] = ("<direct>", None, None)

    def _set_source(self, plugin: str, distribution: str | None, version: str | None) -> None:
        self._source = (plugin, distribution, version)

    def _add(self, kind: str, name: str, obj: Any, help: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"component name {name!r} must be lower-case letters, digits, '-', '_' or '.'")
        plugin, dist, version = self._source
        entry = Entry(name=name, obj=obj, kind=kind, plugin=plugin, distribution=dist, version=version, help=help)
        old = self._entries.get((kind, name))
        if old is not None and old.obj is not obj:
            raise PluginConflictError(f"{kind} name {name!r} is registered by both {old.source} and {entry.source}")
        self._entries[(kind, name)] = entry

    def add(self, name: str, cls: type, *, help: str = "") -> None:
        """Register a component class (a frozen attrs class with ``@fedcore.hookimpl`` methods)."""
        if not isinstance(cls, type):
            raise TypeError(f"registry.add({name!r}, ...) takes a class, got {cls!r}")
        self._add("component", name, cls, help or _first_line(cls.__doc__))

    def add_dataset(self, name: str, factory: Callable[..., Any], *, help: str = "") -> None:
        """Register a dataset factory returning ``(train, test)``."""
        self._add("dataset", name, factory, help or _first_line(factory.__doc__))

    def add_model(self, name: str, factory: Callable[..., Any], *, help: str = "") -> None:
        """Register a model factory returning an ``nn.Module``."""
        self._add("model", name, factory, help or _first_line(factory.__doc__))

    def add_executor(self, name: str, cls: type, *, help: str = "") -> None:
        """Register an executor class (``start(pipeline, dataset)``, ``run(jobs)``, ``close()``); a config
        selects it with ``executor = "name"`` or ``[executor] name = "name"`` plus its keyword arguments."""
        if not isinstance(cls, type):
            raise TypeError(f"registry.add_executor({name!r}, ...) takes a class, got {cls!r}")
        self._add("executor", name, cls, help or _first_line(cls.__doc__))

    def add_table(self, name: str, table: Any, *, help: str = "") -> None:
        """Register a top-level experiment-config table (a :class:`fedcore.experiment.config.Table`)."""
        if not hasattr(table, "key") or not hasattr(table, "build"):
            raise TypeError(f"registry.add_table({name!r}, ...) takes a fedcore.experiment.config.Table, got {table!r}")
        self._add("table", name, table, help or table.key.help)

    def add_recipe(self, name: str, recipe: Any, *, help: str = "") -> None:
        """Register a :class:`fedcore.recipes.Recipe`: a method's named preset of single-slot components."""
        from fedcore.recipes import Recipe

        if not isinstance(recipe, Recipe):
            raise TypeError(f"registry.add_recipe({name!r}, ...) takes a fedcore.recipes.Recipe, got {recipe!r}")
        self._add("recipe", name, recipe, help or recipe.help)

    def get(self, name: str, kind: str = "component") -> Entry:
        try:
            return self._entries[(kind, name)]
        except KeyError:
            raise UnknownComponentError(name, self.names(kind), kind=kind) from None

    def providers(self, slot: str) -> list[Entry]:
        """The components that provide ``slot``."""
        return [e for e in self.entries("component") if slot in e.slots]

    def names(self, kind: str = "component") -> list[str]:
        return sorted(n for (k, n) in self._entries if k == kind)

    def entries(self, kind: str | None = None) -> list[Entry]:
        return [e for (k, _), e in sorted(self._entries.items()) if kind in (None, k)]

    def find(self, obj: Any) -> Entry | None:
        cls = obj if isinstance(obj, type) else type(obj)
        for e in self._entries.values():
            if e.obj is cls:
                return e
        return None
