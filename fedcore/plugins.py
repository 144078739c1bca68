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
from fedcore.registry import ComponentRegistry, Entry

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


def _load() -> _Catalogue:
    registry = ComponentRegistry()
    plugins: dict[str, PluginInfo] = {}
    rows = _entry_points()
    if not any(r[0] == BUILTIN[0] for r in rows):  # running from a source tree without an install
        rows.insert(0, (BUILTIN[0], BUILTIN[1], None, None))
    wanted = _selected([r[0] for r in rows])
    for name, value, dist, version in rows:
        if name != BUILTIN[0] and wanted is not None and name not in wanted:
            continue
        module_name = value.split(":")[0]
        try:
            module: ModuleType = import_module(module_name)
            pm = pluggy.PluginManager("fedcore")
            pm.add_hookspecs(hookspecs)
            pm.register(module, name=name)
            pm.check_pending()
            before = set(registry.names("component")) | {f"{k}:{n}" for k in ("dataset", "model") for n in registry.names(k)}
            registry._set_source(name, dist, version)
            pm.hook.fedcore_register_components(registry=registry)
            after = set(registry.names("component")) | {f"{k}:{n}" for k in ("dataset", "model") for n in registry.names(k)}
            plugins[name] = PluginInfo(name=name, distribution=dist, version=version, module=module_name,
                                       components=tuple(sorted(after - before)))
        except PluginConflictError:
            raise
        except Exception:
            plugins[name] = PluginInfo(name=name, distribution=dist, version=version, module=module_name,
                                       error=traceback.format_exc(limit=3).strip())
        finally:
            registry._set_source("<direct>", None, None)
    return _Catalogue(registry=registry, plugins=plugins)


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


def lookup(name: str, kind: str = "component") -> Entry:
    """The registry entry for ``name``. A name from a plugin that failed to import raises that failure."""
    cat = catalogue()
    try:
        return cat.registry.get(name, kind)
    except UnknownComponentError as exc:
        broken = [p for p in cat.plugins.values() if not p.ok]
        for p in broken:
            if name == p.name or name.startswith(p.name):
                raise BrokenPluginError(
                    f"{kind} {name!r} may come from plugin {p.name!r} ({p.distribution}), which failed to import:\n"
                    f"{p.error}\n(if you just installed it in this process, restart the process)"
                ) from exc
        if broken:
            names = ", ".join(f"{p.name} ({p.distribution})" for p in broken)
            raise UnknownComponentError(name, exc.available, kind=kind).with_traceback(None) from BrokenPluginError(
                f"plugins that failed to import: {names}")
        raise


def get(name: str) -> Any:
    """The component class registered as ``name``: ``fedcore.get("fedavg")()``."""
    return lookup(name).obj


def list_components(slot: str | None = None) -> list[Entry]:
    """Registered components, optionally only those that provide ``slot``."""
    entries = registry().entries("component")
    return [e for e in entries if slot is None or slot in e.slots]


__all__ = [
    "GROUP", "PluginInfo", "get", "list_components", "list_plugins", "lookup", "refresh", "registry"
]
