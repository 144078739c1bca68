"""Experiment configs: a TOML file plus ``--set key=value`` overrides, checked before any work starts.

    name = "fedavg-dirichlet"          # optional; defaults to the file's stem
    seed = 0
    rounds = 10
    num_clients = 10
    eval_every = 1
    threads = 1                        # torch threads (0 = torch's default)
    device = "cpu"                     # "auto" | "cpu" | "cuda" | "cuda:N" | "mps"
    precision = "fp32"                 # "fp32" | "bf16" | "fp16"
    dataset = { name = "digits" }      # a registered dataset and its settings (or just "digits")
    model = { name = "micro-cnn" }     # a registered model; num_classes defaults to the dataset's
    # model = { name = "timm", arch = "deit_small_patch16_224", pretrained = true }   (docs/models.md)
    # [model.lora] r = 8, alpha = 16, target_modules = ["qkv"], dropout = 0.0       (peft LoRA, docs/models.md)

    recipe = "fedv"                    # optional: a method's preset; [pipeline] slots replace or patch it
    [pipeline]                         # slots as in Pipeline.from_config, plus plugins = [...]
    partition = { name = "dirichlet", alpha = 0.5 }
    local_update = { name = "sgd", lr = 0.05 }

    [executor]                         # or executor = "inline"
    name = "inline"

    [checkpoint]
    every = 1                          # rounds between checkpoints (0 = none)
    keep = 2

    [output]
    tensorboard = false
    save_model = true
    client_metrics = false     # true: every aggregated client update's metrics in client_metrics.jsonl

Unknown keys are errors; new top-level tables come from plugins (``registry.add_table`` in
``fedcore_register_components``: the built-in plugin adds clock, profiles and faults) or from
:func:`register_table`, so a subsystem extends the schema without touching this file.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import copy
import math
from pathlib import Path
import re
import sys
from typing import Any

import attrs

from fedcore.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REQUIRED = object()


@attrs.frozen(kw_only=True)
class Key:
    """One allowed key: its type(s), default, lower bound and a help line (shown in errors)."""

    kind: tuple[type, ...]
    default: Any = REQUIRED
    low: float | None = None
    help: str = ""

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, bool) and bool not in self.kind:
            ok = False
        else:
            ok = isinstance(value, self.kind)
        if not ok:
            allowed = " or ".join(_type_name(k) for k in self.kind)
            raise ConfigError(f"{where} = {_show(value)} has type {_type_name(type(value))}; expected {allowed}")
        if self.low is not None and isinstance(value, (int, float)) and value < self.low:
            raise ConfigError(f"{where} = {value!r} is out of range; must be >= {self.low:g}")
        return value


def _type_name(kind: type) -> str:
    return {str: "string", int: "integer", float: "float", bool: "boolean", dict: "table", list: "array"}.get(
        kind, kind.__name__)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


SPEC = (str, dict)  # "name" or { name = "...", settings... }

TOP_LEVEL: dict[str, Key] = {
    "name": Key(kind=(str,), default=None, help="label of the run (default: the config file's stem)"),
    "seed": Key(kind=(int,), default=0, low=0, help="seed of every random stream"),
    "rounds": Key(kind=(int,), low=1, help="number of aggregations"),
    "num_clients": Key(kind=(int,), low=1, help="number of clients"),
    "eval_every": Key(kind=(int,), default=1, low=1, help="evaluate every k rounds (and after the last)"),
    "update_norm_bound": Key(kind=(int, float), default=100.0, low=0, help="reject a client update whose delta norm "
                             "is more than this many times the round's median (0 = off)"),
    "threads": Key(kind=(int,), default=1, low=0, help="torch threads in this process (1 suits micro models; "
                                                      "0 = torch's default)"),
    "device": Key(kind=(str,), default="cpu", help="where the run computes: \"auto\", \"cpu\", \"cuda\", "
                                                    "\"cuda:N\" or \"mps\" (not in the fingerprint: a run resumes on "
                                                    "another device)"),
    "precision": Key(kind=(str,), default="fp32", help="client training arithmetic: \"fp32\", \"bf16\" (autocast, "
                                                       "any device) or \"fp16\" (CUDA/MPS, loss scaling)"),
    "dataset": Key(kind=SPEC, help="registered dataset: \"digits\" or { name = \"digits\", ... }"),
    "model": Key(kind=SPEC, help="registered model: \"micro-cnn\", { name = \"micro-cnn\", ... } or { name = "
                                 "\"timm\", arch = \"deit_small_patch16_224\", pretrained = true }; [model.lora] "
                                 "for peft LoRA (docs/models.md)"),
    "recipe": Key(kind=(str,), default=None, help="a method's registered recipe; [pipeline] slots replace or "
                                                  "patch its components (fedcore plugins lists recipes)"),
    "pipeline": Key(kind=(dict,), default={}, help="slot = component (partition, schedule, split, select, "
                                                   "local_update, aggregate, evaluate) and plugins = [...]"),
    "executor": Key(kind=SPEC, default="inline", help="where client work runs: \"inline\", { name = \"threads\", "
                    "workers = 2 } (a thread pool) or { name = \"ray\", ... }"),
    "checkpoint": Key(kind=(dict,), default={}, help="every = k rounds (0 = never), keep = n newest"),
    "output": Key(kind=(dict,), default={}, help="tensorboard = bool, save_model = bool, client_metrics = bool"),
    "plan": Key(kind=(dict,), default=None, help="the data's shape for fedcore plan and --smoke when the data is "
                                                 "not on this machine: train, test, classes, input = [C, H, W]"),
}

PLAN_KEYS: dict[str, Key] = {
    "train": Key(kind=(int,), low=1, help="training samples"),
    "test": Key(kind=(int,), default=0, low=0, help="test samples"),
    "classes": Key(kind=(int,), low=1, help="number of classes"),
    "input": Key(kind=(list,), help="the shape of one input, e.g. [3, 224, 224]"),
}
"""The ``[plan]`` table: what a dry run and a smoke run need to know of a dataset that is not here (never read by
the data loader, not part of the fingerprint: it changes no result)."""


def check_plan_table(value: Mapping[str, Any]) -> dict[str, Any]:
    unknown = [k for k in value if k not in PLAN_KEYS]
    if unknown:
        raise ConfigError(f"plan: unknown key {unknown[0]!r}; allowed: {allowed_line(PLAN_KEYS)}")
    out = {}
    for k, key in PLAN_KEYS.items():
        if k not in value:
            if key.default is REQUIRED:
                raise ConfigError(f"plan: missing required key {k!r} ({key.help})")
            out[k] = key.default
            continue
        out[k] = key.check(f"plan.{k}", value[k])
    dims = out["input"]
    if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ConfigError(f"plan.input = {_show(dims)} must be a non-empty array of positive integers, "
                          f"e.g. [3, 224, 224]")
    return out

TABLE_KEYS: dict[str, dict[str, Key]] = {
    "checkpoint": {"every": Key(kind=(int,), default=1, low=0), "keep": Key(kind=(int,), default=2, low=1)},
    "output": {"tensorboard": Key(kind=(bool,), default=False), "save_model": Key(kind=(bool,), default=True),
               "client_metrics": Key(kind=(bool,), default=False)},
}


@attrs.frozen(kw_only=True)
class Table:
    """An extension table: ``check(value, where)`` validates it (raise ConfigError), ``build(value, context)``
    returns keyword arguments for :meth:`fedcore.Pipeline.run` (``context`` has seed, num_clients, train, test)."""

    key: Key
    check: Callable[[Any, str], None] | None = None
    build: Callable[[Any, Mapping[str, Any]], Mapping[str, Any]] | None = None
    settings: str | None = None
    """``"module:Class"`` whose keyword settings the table holds (shown by ``fedcore describe NAME``)."""


EXTENSIONS: dict[str, Table] = {}
"""Tables added in this process with :func:`register_table` (scripts, tests); plugins register theirs
through the catalogue (``registry.add_table``), see :func:`tables`."""


def tables() -> dict[str, Table]:
    """Every extension table: the catalogue's (``registry.add_table`` in a plugin, e.g. the built-in clock,
    profiles and faults) and those added with :func:`register_table`."""
    import fedcore.plugins

    out = {e.name: e.obj for e in fedcore.plugins.registry().entries("table")}
    for name in out:
        if name in TOP_LEVEL and name not in EXTENSIONS:
            raise ConfigError(f"config table {name!r} registered by a plugin is already a key of every config")
    return {**out, **EXTENSIONS}


def top_level() -> dict[str, Key]:
    """Every allowed top-level key: the core's and the extension tables'."""
    return {**TOP_LEVEL, **{name: table.key for name, table in tables().items()}}


def register_table(name: str, *, kind: tuple[type, ...] = (dict,), default: Any = None, help: str = "",
                   check: Callable[[Any, str], None] | None = None,
                   build: Callable[[Any, Mapping[str, Any]], Mapping[str, Any]] | None = None) -> None:
    """Allow a new top-level key ``name`` in experiment configs, in this process (a plugin registers its
    tables through the catalogue instead: ``registry.add_table(name, Table(...))``)."""
    if name in TOP_LEVEL:
        raise ValueError(f"config key {name!r} is already defined")
    TOP_LEVEL[name] = Key(kind=kind, default=default, help=help)
    EXTENSIONS[name] = Table(key=TOP_LEVEL[name], check=check, build=build)


def allowed_line(keys: Mapping[str, Key]) -> str:
    return ", ".join(keys)


INT64 = (-(2**63), 2**63 - 1)
"""The integers a config holds (TOML's own range; torch and numpy seeds and sizes live in it)."""


def check_numbers(value: Any, where: str = "") -> None:
    """No NaN or infinity and no integer beyond 64 bits anywhere in a config: no setting gives them a meaning (a
    NaN passes every range check and a learning rate of NaN would fail only after the run), so the first one is
    refused in one line naming its dotted key."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_numbers(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_numbers(v, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} = {value!r} is not a finite number; give a finite value")
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
        raise ConfigError(f"{where} = {_show(value)} is out of range; integers must fit in 64 bits "
                          f"({INT64[0]} to {INT64[1]})")


def validate(config: Mapping[str, Any], *, source: str = "config") -> dict[str, Any]:
    """The config with top-level defaults filled in; the first problem raises a one-line ConfigError."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: the config must be a table")
    check_numbers(config)
    keys, extensions = top_level(), tables()
    unknown = [k for k in config if k not in keys]
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}; allowed: {allowed_line(keys)}")
    out: dict[str, Any] = {}
    for name, key in keys.items():
        if name not in config:
            if key.default is REQUIRED:
                raise ConfigError(f"{source}: missing required key {name!r} ({key.help})")
            if key.default is not None:
                out[name] = copy.deepcopy(key.default)
            continue
        out[name] = key.check(name, config[name])
    for name in ("dataset", "model", "executor"):
        if isinstance(out.get(name), dict):
            spec = out[name]
            if "name" not in spec:
                raise ConfigError(f"{name}: a table needs a 'name' key (got keys: {', '.join(spec) or 'none'})")
            if not isinstance(spec["name"], str):
                raise ConfigError(f"{name}.name = {_show(spec['name'])} must be a string")
    for table, keys in TABLE_KEYS.items():
        given = dict(out.get(table, {}))
        unknown = [k for k in given if k not in keys]
        if unknown:
            raise ConfigError(f"{table}: unknown key {unknown[0]!r}; allowed: {allowed_line(keys)}")
        filled = {}
        for k, key in keys.items():
            filled[k] = key.check(f"{table}.{k}", given[k]) if k in given else copy.deepcopy(key.default)
        out[table] = filled
    if out.get("plan") is not None:
        out["plan"] = check_plan_table(out["plan"])
    for name, ext in extensions.items():
        if name in out and ext.check is not None:
            ext.check(out[name], name)
    return out


# -- reading and overriding -------------------------------------------------------------------------------

_SET = re.compile(r"^\s*([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\s*=(.*)$", re.S)
_BARE = re.compile(r"^[^\W\d][\w.\-/]*$")  # a bare word: letters (any script), digits, _ . - /


def parse_set(text: str) -> tuple[list[str], Any]:
    """``"pipeline.local_update.lr=0.1"`` -> (["pipeline", "local_update", "lr"], 0.1); the value is TOML
    (a bare word such as ``digits`` is taken as a string)."""
    m = _SET.match(text)
    if not m:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE with a dotted KEY,"
                          " e.g. --set pipeline.local_update.lr=0.1")
    path, raw = m.group(1).split("."), m.group(2).strip()
    if raw == "":
        raise ConfigError(f"--set {text!r}: no value after '='")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as exc:
        if _BARE.match(raw):
            value = raw
        else:
            raise ConfigError(f"--set {text!r}: the value {raw!r} is not valid TOML ({exc}); quote strings, "
                              f"e.g. --set 'name=\"a b\"'") from None
    return path, value


def apply_set(config: dict[str, Any], text: str) -> None:
    """Apply one ``--set``; a component given by name becomes a table when a setting is set under it."""
    path, value = parse_set(text)
    set_value(config, path, value, text=text)


def set_value(config: dict[str, Any], path: Sequence[str], value: Any, *, text: str | None = None) -> None:
    """Set ``value`` (a TOML value) at the dotted ``path`` as ``--set`` does; ``text`` names it in errors."""
    text = text if text is not None else ".".join(path)
    node: Any = config
    for i, part in enumerate(path[:-1]):
        where = ".".join(path[: i + 1])
        if isinstance(node, list):
            node = node[_index(part, node, where)]
            continue
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif isinstance(child, str):  # "sgd" -> { name = "sgd" } so that pipeline.local_update.lr=... works
            child = node[part] = {"name": child}
        elif not isinstance(child, (dict, list)):
            raise ConfigError(f"--set {text!r}: {where} is a {_type_name(type(child))}, not a table")
        node = child
    last = path[-1]
    if isinstance(node, list):
        node[_index(last, node, ".".join(path))] = value
    else:
        node[last] = value


def _index(part: str, items: list, where: str) -> int:
    if not part.isdigit() or int(part) >= len(items):
        raise ConfigError(f"--set: {where}: {part!r} is not an index of an array of {len(items)} items")
    return int(part)


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist" if not path.exists()
                          else f"config {str(path)!r} is not a file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file") from None


def load_config(path: str | Path | None, sets: Sequence[str] = (), *, base: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """Read ``path`` (or start from ``base``), apply ``--set`` overrides in order, validate, fill defaults."""
    raw = read_toml(path) if path is not None else copy.deepcopy(dict(base or {}))
    for text in sets:
        apply_set(raw, text)
    config = validate(raw, source=str(path) if path is not None else "config")
    if config.get("name") is None:
        config["name"] = Path(path).stem if path is not None else "run"
    return config
