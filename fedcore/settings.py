"""Validated component settings: ``attrs`` fields that convert TOML values and name the field in errors.

    @attrs.frozen(eq=False, kw_only=True)
    class SGDUpdate:
        lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
        optimizer: str = setting("sgd", choices=("sgd", "adam"))
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError


def _converter(kind: type | None):
    def convert(value: Any) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if kind is tuple and isinstance(value, list):
            return tuple(value)
        return value
    return convert


def setting(default: Any = attrs.NOTHING, *, kind: type | tuple[type, ...] | None = None, low: float | None = None,
            high: float | None = None, low_open: bool = False, high_open: bool = False,
            choices: Sequence[Any] | None = None, optional: bool = False, help: str = "") -> Any:
    """An attrs field with type/range/choice checks whose errors name the field and what is allowed."""
    if kind is None and default is not attrs.NOTHING and default is not None:
        kind = type(default)
    single = kind if isinstance(kind, type) else None

    def validate(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        owner = type(instance).__name__
        name = f"{owner}.{attribute.name}"
        if value is None and optional:
            return
        if kind is not None:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
            if not ok:
                allowed = " or ".join(k.__name__ for k in kinds)
                raise ConfigError(f"{name}={value!r} has type {type(value).__name__}; expected {allowed}")
        if choices is not None and value not in choices:
            raise ConfigError(f"{name}={value!r} is not allowed; choose one of: {', '.join(map(repr, choices))}")
        if low is not None and (value < low or (low_open and value == low)):
            raise ConfigError(f"{name}={value!r} is out of range; must be {'>' if low_open else '>='} {low}")
        if high is not None and (value > high or (high_open and value == high)):
            raise ConfigError(f"{name}={value!r} is out of range; must be {'<' if high_open else '<='} {high}")

    return attrs.field(default=default, converter=_converter(single), validator=validate, metadata={"help": help})


def settings_of(component: Any) -> dict[str, Any]:
    """The component's settings as plain values (for manifests and configs)."""
    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if attrs.has(type(v)):
            return {f.name: plain(getattr(v, f.name)) for f in attrs.fields(type(v))}
        return v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v)
    if not attrs.has(type(component)):
        return {}
    return {f.name: plain(getattr(component, f.name)) for f in attrs.fields(type(component)) if f.init}


def build(cls: type, settings: dict[str, Any], *, name: str | None = None) -> Any:
    """``cls(**settings)`` with a clear error for unknown or invalid settings."""
    label = name or cls.__name__
    if attrs.has(cls):
        allowed = [f.name for f in attrs.fields(cls) if f.init]
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise ConfigError(f"{label}: unknown setting(s) {unknown}; allowed: {', '.join(allowed) or '(none)'}")
    try:
        return cls(**settings)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{label}: {exc}") from None


__all__ = [
    "build", "setting", "settings_of"
]
