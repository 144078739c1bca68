"""Validated component settings: ``attrs`` fields that convert TOML values and name the field in errors.

    @attrs.frozen(eq=False, kw_only=True)
    class SGDUpdate:
        lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
        optimizer: str = setting("sgd", choices=("sgd", "adam"))
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import inspect
import math
from typing import Any, TypeVar

import attrs

from fedcore.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


def _converter(kind: type | None) -> Callable[[Any], Any]:
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
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={value!r} is not a finite number; {_range_text(low, high, low_open, high_open)}")
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            raise ConfigError(f"{name}={value!r} is out of range; integers must fit in 64 bits")
        if choices is not None and value not in choices:
            raise ConfigError(f"{name}={value!r} is not allowed; choose one of: {', '.join(map(repr, choices))}")
        if low is not None and (value < low or (low_open and value == low)):
            raise ConfigError(f"{name}={value!r} is out of range; must be {'>' if low_open else '>='} {low}")
        if high is not None and (value > high or (high_open and value == high)):
            raise ConfigError(f"{name}={value!r} is out of range; must be {'<' if high_open else '<='} {high}")

    meta = {"help": help, "kind": kind, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
            "choices": tuple(choices) if choices is not None else None, "optional": optional}
    return attrs.field(default=default, converter=_converter(single), validator=validate, metadata=meta)


INT64 = (-(2**63), 2**63 - 1)


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    text = allowed_text({"low": low, "high": high, "low_open": low_open, "high_open": high_open})
    return f"must be {text}" if text else "give a finite value"


def allowed_text(meta: Mapping[str, Any]) -> str:
    """What a setting accepts, from its :func:`setting` metadata: ``"> 0"``, ``"[0, 1)"``, ``"'sgd' | 'adam'"``."""
    if meta.get("choices") is not None:
        return " | ".join(map(repr, meta["choices"]))
    low, high = meta.get("low"), meta.get("high")
    if low is not None and high is not None:
        return f"{'(' if meta.get('low_open') else '['}{low:g}, {high:g}{')' if meta.get('high_open') else ']'}"
    if low is not None:
        return f"{'>' if meta.get('low_open') else '>='} {low:g}"
    if high is not None:
        return f"{'<' if meta.get('high_open') else '<='} {high:g}"
    return ""


def _type_text(kind: Any, annotation: Any, optional: bool) -> str:
    if kind is not None:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        text = " | ".join(k.__name__ for k in kinds)
        return f"{text} | None" if optional else text
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", "") if annotation is not None else ""


def describe_settings(obj: Any) -> list[dict[str, Any]]:
    """One row per setting of a component class (attrs fields) or a factory (keyword parameters): name,
    type, default (``required`` when there is none), allowed values and help. Plain values, for JSON."""
    rows = []
    if attrs.has(obj):
        for f in attrs.fields(obj):
            if not f.init:
                continue
            meta = f.metadata
            default = f.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory() if not default.takes_self else attrs.NOTHING
            rows.append({"name": f.name, "type": _type_text(meta.get("kind"), f.type, bool(meta.get("optional"))),
                         "required": default is attrs.NOTHING,
                         "default": None if default is attrs.NOTHING else _plain(default),
                         "allowed": allowed_text(meta), "help": meta.get("help", "")})
        return rows
    try:
        params = list(inspect.signature(obj).parameters.values())  # a class: its __init__ without self
    except (TypeError, ValueError):
        return rows
    helps = getattr(obj, HELP_ATTRIBUTE, {})
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            rows.append({"name": f"**{p.name}", "type": "", "required": False, "default": None, "allowed": "",
                         "help": helps.get(p.name, "further keyword settings, passed on as they are")})
            continue
        if p.name == "self" or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        required = p.default is p.empty
        annotation = None if p.annotation is p.empty else p.annotation
        type_text = _type_text(None, annotation, False) or ("" if required else type(p.default).__name__)
        rows.append({"name": p.name, "type": type_text, "required": required,
                     "default": None if required else _plain(p.default), "allowed": "", "help": helps.get(p.name, "")})
    return rows


HELP_ATTRIBUTE = "__fedcore_settings_help__"


def settings_help(**helps: str) -> Callable[[F], F]:
    """Help lines for a factory's keyword settings (``fedcore describe NAME`` shows them, as it shows a component's
    :func:`setting` help); the ``**kwargs`` parameter's help goes under its own name::

        @settings_help(arch="a timm architecture", kwargs="passed to timm.create_model")
        def timm_model(*, arch: str, **kwargs): ...
    """
    def decorate(fn: F) -> F:
        setattr(fn, HELP_ATTRIBUTE, dict(helps))
        return fn
    return decorate


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if attrs.has(type(v)):
        return {f.name: _plain(getattr(v, f.name)) for f in attrs.fields(type(v))}
    return v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else repr(v)


def settings_of(component: Any) -> dict[str, Any]:
    """The component's settings as plain values (for manifests and configs)."""
    if not attrs.has(type(component)):
        return {}
    return {f.name: _plain(getattr(component, f.name)) for f in attrs.fields(type(component)) if f.init}


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
    "build", "setting", "settings_help", "settings_of"
]
