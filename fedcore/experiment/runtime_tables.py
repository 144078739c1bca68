"""Config tables for the heterogeneous-device runtime (``fedcore.runtime``): clock, profiles, faults.

    [clock]                       # simulated device time: fedcore.runtime.SimClock settings
    default_profile = "phone"     # profiles = "devices.toml" adds user-defined devices to the presets

    [profiles]                    # who gets which device: fedcore.runtime.ProfileAssignment settings
    weights = { watch = 4, phone = 2, laptop = 2 }     # or fixed = "phone", or order = [...]

    [faults]                      # seeded faults: fedcore.runtime.Faults settings
    dropout_during = 0.1

The built-in plugin registers them through the catalogue (``registry.add_table``), as a third-party
plugin registers its own. Each table is checked when the config is read (unknown settings, wrong types) and built
when the run is materialized; the objects go to :meth:`fedcore.Pipeline.run` as ``clock=``, ``profiles=``
and ``faults=``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedcore.errors import ConfigError
from fedcore.experiment.config import Key, Table


def _settings_check(factory_path: str) -> Callable[[Any, str], None]:
    def check(value: Any, where: str) -> None:
        from fedcore.experiment.build import check_settings, load_object

        check_settings(load_object(factory_path), value, where)
    return check


def _build_clock(value: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    from fedcore.runtime import SimClock

    return {"clock": SimClock(**dict(value))}


def _build_profiles(value: Any, context: Mapping[str, Any]) -> dict[str, Any]:
    from fedcore.runtime import ProfileAssignment

    if isinstance(value, list):
        return {"profiles": [str(v) for v in value]}
    return {"profiles": ProfileAssignment(**dict(value))}


def _check_profiles(value: Any, where: str) -> None:
    if isinstance(value, list):
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            raise ConfigError(f"{where} = [...] must list profile names (strings); got {bad[0]!r}")
        return
    _settings_check("fedcore.runtime:ProfileAssignment")(value, where)


def _build_faults(value: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    from fedcore.runtime import Faults

    return {"faults": Faults(**dict(value))}


TABLES: dict[str, Table] = {
    "clock": Table(key=Key(kind=(dict,), default=None, help="simulated device time: fedcore.runtime.SimClock "
                           "settings (default_profile, ...)"),
                   check=_settings_check("fedcore.runtime:SimClock"), build=_build_clock,
                   settings="fedcore.runtime:SimClock"),
    "profiles": Table(key=Key(kind=(dict, list), default=None, help="device profile per client: [\"phone\", ...] "
                              "or { weights = { watch = 4, phone = 2 } } (fedcore.runtime.ProfileAssignment)"),
                      check=_check_profiles, build=_build_profiles,
                      settings="fedcore.runtime:ProfileAssignment"),
    "faults": Table(key=Key(kind=(dict,), default=None, help="seeded faults: fedcore.runtime.Faults settings "
                            "(dropout_during, lost_upload, ...)"),
                    check=_settings_check("fedcore.runtime:Faults"), build=_build_faults,
                    settings="fedcore.runtime:Faults"),
}


def register(registry: Any) -> None:
    """Called by the built-in plugin: the runtime's tables join the catalogue like any plugin's."""
    for name, table in TABLES.items():
        registry.add_table(name, table)
