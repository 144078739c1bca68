"""The entry-point catalogue: which plugins are installed, and what names they offer.

Discovery is lazy (nothing is read until a name is asked for) and cached per process; call
:func:`refresh` after installing a plugin in a running process (a *new* editable install still
needs a new process: Python cannot import it into the running one). Installed is not active: the
catalogue only resolves names; a :class:`~fedcore.Pipeline` runs exactly the components it is given.

Environment switches:

* ``FEDCORE_PLUGINS=fedprox,robust`` loads only these entry-point names (empty: none);
* ``FEDCORE_DISABLE_PLUGIN_AUTOLOAD=1`` loads no third-party plugin.

The built-in components are always available.
"""
from __future__ import annotations

from importlib import import_module, metadata
import os
import traceback
from types import ModuleType
from typing import Any

import attrs
import pluggy

from fedcore import hookspecs
from fedcore.errors import BrokenPluginError, PluginConflictError, UnknownComponentError
from fedcore.first_party import PACKAGES
from fedcore.registry import KINDS, ComponentRegistry, Entry

GROUP = "fedcore"
BUILTIN = ("builtin", "fedcore.builtin.plugin")


@attrs.frozen(kw_only=True)
class PluginInfo:
    """One installed plugin (entry point): where it comes from and what it offers, or why it failed."""

    name: str
    distribution: str | None
    version: str | None
    module: str
    components: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@attrs.define
class _Catalogue:
    registry: ComponentRegistry
    plugins: dict[str, PluginInfo]
    left_out: dict[str, str] = attrs.Factory(dict)
    """Distribution -> entry-point name of installed plugins that FEDCORE_PLUGINS / _DISABLE_... did not load."""


_cache: _Catalogue | None = None


def refresh() -> None:
    """Forget what was discovered; the next lookup reads the entry points again."""
    global _cache
    _cache = None


def _selected(names: list[str]) -> set[str] | None:
    if os.environ.get("FEDCORE_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0"):
        return set()
    raw = os.environ.get("FEDCORE_PLUGINS")
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _entry_points() -> list[tuple[str, str, str | None, str | None]]:
    """(name, module, distribution, version) for each fedcore entry point, de-duplicated; clashes raise."""
    seen: dict[str, tuple[str, str, str | None, str | None]] = {}
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        dname = dist.metadata["Name"] if dist is not None else None
        version = dist.version if dist is not None else None
        row = (ep.name, ep.value, dname, version)
        old = seen.get(ep.name)
        if old is not None and old[2] != dname:
            raise PluginConflictError(
                f"plugin name {ep.name!r} is offered by two distributions: {old[2]} {old[3]} ({old[1]}) "
                f"and {dname} {version} ({ep.value}); uninstall one of them"
            )
        seen[ep.name] = row  # the same distribution seen twice on sys.path (lib64 -> lib) is one plugin
    return list(seen.values())


def _names(registry: ComponentRegistry) -> set[str]:
    """Every registered name; names of other kinds than components carry their kind: ``executor:ray``."""
    return {n if k == "component" else f"{k}:{n}" for k in KINDS for n in registry.names(k)}


def _load() -> _Catalogue:
    registry = ComponentRegistry()
    plugins: dict[str, PluginInfo] = {}
    rows = _entry_points()
    if not any(r[0] == BUILTIN[0] for r in rows):  # running from a source tree without an install
        rows.insert(0, (BUILTIN[0], BUILTIN[1], None, None))
    wanted = _selected([r[0] for r in rows])
    left_out: dict[str, str] = {}
    for name, value, dist, version in rows:
        if name != BUILTIN[0] and wanted is not None and name not in wanted:
            left_out[dist or name] = name
            continue
        module_name = value.split(":")[0]
        try:
            module: ModuleType = import_module(module_name)
            pm = pluggy.PluginManager("fedcore")
            pm.add_hookspecs(hookspecs)
            pm.register(module, name=name)
            pm.check_pending()
            before = _names(registry)
            registry._set_source(name, dist, version)
            pm.hook.fedcore_register_components(registry=registry)
            after = _names(registry)
            plugins[name] = PluginInfo(name=name, distribution=dist, version=version, module=module_name,
                                       components=tuple(sorted(after - before)))
        except PluginConflictError:
            raise
        except Exception:
            plugins[name] = PluginInfo(name=name, distribution=dist, version=version, module=module_name,
                                       error=traceback.format_exc(limit=3).strip())
        finally:
            registry._set_source("<direct>", None, None)
    return _Catalogue(registry=registry, plugins=plugins, left_out=left_out)


def catalogue() -> _Catalogue:
    global _cache
    if _cache is None:
        _cache = _load()
    return _cache


def registry() -> ComponentRegistry:
    return catalogue().registry


def list_plugins() -> list[PluginInfo]:
    """Every discovered plugin, including the ones that failed to import (with the reason)."""
    return sorted(catalogue().plugins.values(), key=lambda p: (p.name != BUILTIN[0], p.name))


def lookup(name: str, kind: str = "component", *, slot: str | None = None) -> Entry:
    """The registry entry for ``name``. A name from a plugin that failed to import raises that failure; an
    unknown name lists the names of its kind (only the providers of ``slot`` when given) or, for a name of
    a first-party distribution that is not installed or not loaded, says so in one line."""
    cat = catalogue()
    try:
        return cat.registry.get(name, kind)
    except UnknownComponentError as exc:
        broken = [p for p in cat.plugins.values() if not p.ok]
        package = PACKAGES.get(name)
        if kind == "component" and name in cat.registry.names("recipe"):  # e.g. 0.1 names that became recipes
            raise UnknownComponentError(name, (), kind=kind, slot=slot, reason=(
                f"{name!r} is a recipe (a preset pipeline of components), not a component: write recipe = "
                f"\"{name}\" in TOML or fedcore.recipe(\"{name}\") in Python, and give settings to the slot that "
                f"owns them (fedcore describe {name})")) from None
        for p in broken:
            if name == p.name or name.startswith(p.name) or (package and package == p.distribution):
                cause = (p.error or "").strip().splitlines()[-1]  # e.g. "ModuleNotFoundError: No module named 'peft'"
                raise BrokenPluginError(
                    f"{kind} {name!r} may come from plugin {p.name!r} ({p.distribution}), which failed to import: "
                    f"{cause}\n{p.error}\n(if you just installed it in this process, restart the process)"
                ) from exc
        if package and not any(p.distribution == package for p in cat.plugins.values()):
            raise UnknownComponentError(name, (), kind=kind, slot=slot, reason=_not_loaded(package, cat)) from None
        available, note = exc.available, ""
        if slot is not None and kind == "component":
            providers = cat.registry.providers(slot)
            available = [e.name for e in providers]
            sources = sorted({e.source for e in providers})
            note = f" (installed plugins providing {slot!r}: {', '.join(sources) or 'none'})"
        error = UnknownComponentError(name, available, kind=kind, slot=slot, note=note)
        if broken:
            names = ", ".join(f"{p.name} ({p.distribution})" for p in broken)
            raise error.with_traceback(None) from BrokenPluginError(f"plugins that failed to import: {names}")
        raise error from None


def _not_loaded(package: str, cat: _Catalogue) -> str:
    """Why a first-party distribution's names are missing: not installed, or installed and left out."""
    entry_point = cat.left_out.get(package)
    if entry_point is None:
        return f"it is provided by the {package} package, which is not installed (pip install {package})"
    switch = ("FEDCORE_DISABLE_PLUGIN_AUTOLOAD is set" if os.environ.get("FEDCORE_DISABLE_PLUGIN_AUTOLOAD", "").strip()
              not in ("", "0") else f"FEDCORE_PLUGINS does not list {entry_point!r}")
    return f"it is provided by the {package} package, which is installed but not loaded ({switch})"


def missing_library(entry: Entry, exc: ImportError) -> str:
    """One line for a plugin that registered ``entry`` but cannot build it: the library its factory or class
    imports where it builds (docs/plugins.md, "Registration stays light") failed to import."""
    cause = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    origin = f"{entry.plugin!r} ({entry.distribution} {entry.version})" if entry.distribution else repr(entry.plugin)
    return (f"{entry.kind} {entry.name!r} of plugin {origin} cannot be built: a library it needs failed to import: "
            f"{cause}")


def get(name: str, *, slot: str | None = None) -> Any:
    """The component class registered as ``name``: ``fedcore.get("fedavg")()``; ``slot`` narrows the
    unknown-name error to that slot's providers."""
    return lookup(name, slot=slot).obj


def list_components(slot: str | None = None) -> list[Entry]:
    """Registered components, optionally only those that provide ``slot``."""
    entries = registry().entries("component")
    return [e for e in entries if slot is None or slot in e.slots]


__all__ = [
    "GROUP", "PluginInfo", "get", "list_components", "list_plugins", "lookup", "refresh", "registry"
]
