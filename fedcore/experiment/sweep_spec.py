"""A sweep: one run config, a grid of settings and a list of seeds; every (setting, seed) is a cell.

    # any run config, plus:
    [sweep]
    seeds = 3                          # seeds 0, 1, 2 (or a list: [0, 1, 2])
    baseline = "lr=0.05"               # the setting the report pairs the others against (default: the first)
    [sweep.grid]                       # dotted config keys -> values; every combination is a setting
    "pipeline.local_update.lr" = [0.05, 0.1]
    [sweep.variants]                   # optional named settings, each a table of dotted keys (crossed with the grid)
    plain = {}
    prox = { "pipeline.local_update.prox_mu" = 0.01 }

Each cell is a normal run directory, ``SWEEP_DIR/<setting>/seed-<n>``; the spec itself is kept as
``SWEEP_DIR/sweep.toml`` and the list of cells as ``SWEEP_DIR/sweep.json``, so ``fedcore sweep --resume``
and ``fedcore report`` need nothing else.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
import itertools
import json
from pathlib import Path
import re
from typing import Any

import attrs
import tomli_w

from fedcore.errors import ConfigError
from fedcore.experiment.build import plan
from fedcore.experiment.config import parse_set, read_toml, set_value, validate
from fedcore.experiment.rundir import atomic_write

SPEC, CELLS = "sweep.toml", "sweep.json"
SWEEP_KEYS = ("seeds", "baseline", "metric", "grid", "variants")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


@attrs.frozen(kw_only=True)
class Setting:
    """One point of the grid: its label (``"lr=0.05"``), directory name and the dotted keys it sets."""

    label: str
    values: dict[str, Any]
    parts: tuple[tuple[str, str], ...] = ()
    """(dimension, text) per part of the label: ``("variant", "fedfft")``, ``("pipeline.x.lr", "lr=0.05")``."""

    @property
    def dirname(self) -> str:
        return _UNSAFE.sub("_", self.label.replace(" ", ",")) or "base"


@attrs.frozen(kw_only=True)
class Cell:
    """One run of a sweep: a setting at a seed, with its resolved config and fingerprint."""

    setting: Setting
    seed: int
    config: dict[str, Any]
    fingerprint: str

    @property
    def dirname(self) -> str:
        return f"{self.setting.dirname}/seed-{self.seed}"


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return repr(value)


def _short_names(keys: Sequence[str]) -> dict[str, str]:
    """The last part of each dotted key, or the whole key where two keys share a last part."""
    leaves = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: leaf if leaves.count(leaf) == 1 else k for k, leaf in zip(keys, leaves)}


@attrs.frozen(kw_only=True)
class Sweep:
    """The base run config (without ``[sweep]``), the grid, named variants and seeds."""

    base: dict[str, Any]
    grid: dict[str, list[Any]] = attrs.field(factory=dict)
    variants: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    seeds: list[int] = attrs.field(factory=lambda: [0])
    baseline: str | None = None
    metric: str | None = None

    @property
    def name(self) -> str:
        return str(self.base.get("name") or "sweep")

    def settings(self) -> list[Setting]:
        names = _short_names(list(self.grid))
        variants = list(self.variants.items()) or [("", {})]
        out = []
        for (vname, vvalues), combo in itertools.product(variants, itertools.product(*self.grid.values())):
            parts = [("variant", vname)] if vname else []
            parts += [(k, f"{names[k]}={_render(v)}") for k, v in zip(self.grid, combo)]
            out.append(Setting(label=" ".join(text for _, text in parts) or "base", parts=tuple(parts),
                               values={**vvalues, **dict(zip(self.grid, combo))}))
        labels = [s.dirname for s in out]
        if len(set(labels)) != len(labels):
            dup = next(lab for lab in labels if labels.count(lab) > 1)
            raise ConfigError(f"sweep: two settings share the directory name {dup!r}; rename a variant")
        return out

    def cells(self) -> list[Cell]:
        """Every (setting, seed), each config checked and resolved (names and settings) before any work."""
        out = []
        for setting in self.settings():
            for seed in self.seeds:
                raw = copy.deepcopy(self.base)
                for key, value in setting.values.items():
                    set_value(raw, key.split("."), copy.deepcopy(value), text=f"sweep {key}")
                raw["seed"] = seed
                raw["name"] = f"{self.name}/{setting.dirname}/seed-{seed}"
                try:
                    p = plan(validate(raw, source=f"sweep cell {setting.label!r} seed {seed}"))
                except ConfigError as exc:
                    raise ConfigError(f"sweep cell {setting.label!r} seed {seed}: {exc}") from None
                out.append(Cell(setting=setting, seed=seed, config=p.resolved, fingerprint=p.fingerprint))
        return out

    def baseline_label(self) -> str:
        """The baseline as given (a label, or parts of labels such as a variant's name), or the first setting."""
        return self.baseline if self.baseline is not None else self.settings()[0].label

    def baselines(self) -> dict[str, str]:
        """Each setting's label -> the label of the setting it is paired with (see :func:`pair_baselines`)."""
        return pair_baselines(self.baseline, [(s.label, s.parts) for s in self.settings()])

    def to_toml(self) -> str:
        table: dict[str, Any] = {"seeds": list(self.seeds)}
        if self.baseline is not None:
            table["baseline"] = self.baseline
        if self.metric is not None:
            table["metric"] = self.metric
        if self.grid:
            table["grid"] = self.grid
        if self.variants:
            table["variants"] = self.variants
        header = "# The sweep as run: `fedcore sweep --resume DIR` continues it, `fedcore report DIR` summarises it.\n"
        return header + tomli_w.dumps({**self.base, "sweep": table})


def pair_baselines(given: str | None, settings: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> dict[str, str]:
    """Each setting's label -> the label of its baseline.

    ``given`` is a whole label (every setting is paired with that one), or some parts of labels, such as a
    variant's name in a sweep of variants x grid: each setting is then paired with the setting that has those
    parts and keeps its own other parts (``"fedfft"``: every variant against FedFFT at the same grid point).
    None: the first setting."""
    labels = [label for label, _ in settings]
    if given is None or given in labels:
        return {label: given if given is not None else labels[0] for label in labels}
    chosen: dict[str, str] = {}
    for token in given.split(" "):
        owners = {dim for _, parts in settings for dim, text in parts if text == token}
        if len(owners) != 1:
            raise ConfigError(f"sweep baseline {given!r} is not a setting; choices: "
                              f"{', '.join(repr(label) for label in labels)} (or a variant's name)")
        chosen[owners.pop()] = token
    by_parts = {tuple(parts): label for label, parts in settings}
    out = {}
    for label, parts in settings:
        target = tuple((dim, chosen.get(dim, text)) for dim, text in parts)
        if target not in by_parts:
            raise ConfigError(f"sweep baseline {given!r}: no setting {' '.join(t for _, t in target)!r} "
                              f"to pair {label!r} with")
        out[label] = by_parts[target]
    return out


def _seeds(value: Any, where: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{where} = {value}: give at least one seed")
        return list(range(value))
    if isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                 for s in value):
        if len(set(value)) != len(value):
            raise ConfigError(f"{where} = {value}: a seed is repeated")
        return list(value)
    raise ConfigError(f"{where} = {value!r}: expected a count (3) or a list of non-negative integers ([0, 1, 2])")


def _grid(value: Any) -> dict[str, list[Any]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"sweep.grid must be a table of dotted keys -> arrays of values, got {value!r}")
    out = {}
    for key, values in value.items():
        if key in ("seed", "name"):
            raise ConfigError(f"sweep.grid: {key!r} cannot be swept here; use sweep.seeds (or --seeds) for seeds")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep.grid.{key} = {values!r} must be a non-empty array of values")
        out[str(key)] = list(values)
    return out


def _variants(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"sweep.variants must be a table of name -> {{ dotted key = value }}, got {value!r}")
    out = {}
    for name, values in value.items():
        if not isinstance(values, Mapping):
            raise ConfigError(f"sweep.variants.{name} must be a table of dotted keys, got {values!r}")
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
            raise ConfigError(f"sweep.variants: name {name!r} may use letters, digits and . _ + - only")
        out[str(name)] = {str(k): v for k, v in values.items()}
    return out


def parse_grid(texts: Sequence[str]) -> dict[str, list[Any]]:
    """``["pipeline.local_update.lr=0.05,0.1"]`` -> ``{"pipeline.local_update.lr": [0.05, 0.1]}`` (TOML values;
    commas separate values, so a value containing a comma belongs in the TOML's ``[sweep.grid]``)."""
    out: dict[str, list[Any]] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        if not sep or not raw.strip():
            raise ConfigError(f"--grid {text!r}: expected KEY=VALUE,VALUE,..., "
                              f"e.g. --grid pipeline.local_update.lr=0.05,0.1")
        out.update(_grid({key.strip(): [parse_set(f"v={part}")[1] for part in raw.split(",")]}))
    return out


def load_sweep_spec(path: str | Path, *, sets: Sequence[str] = (), grid: Sequence[str] = (),
                    seeds: int | Sequence[int] | None = None, baseline: str | None = None) -> Sweep:
    """A sweep from a run config (with or without a ``[sweep]`` table) plus command-line additions:
    ``sets`` patch the base config, ``grid`` adds or replaces grid keys, ``seeds`` replaces the seeds."""
    from fedcore.experiment.config import apply_set

    raw = read_toml(path)
    table = raw.pop("sweep", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: sweep must be a table ([sweep])")
    unknown = [k for k in table if k not in SWEEP_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown key sweep.{unknown[0]}; allowed: {', '.join(SWEEP_KEYS)}")
    for text in sets:
        apply_set(raw, text)
    raw.setdefault("name", Path(path).stem)
    spec = Sweep(base=raw, grid={**_grid(table.get("grid", {})), **parse_grid(grid)},
                 variants=_variants(table.get("variants", {})),
                 seeds=_seeds(seeds if seeds is not None else table.get("seeds", [raw.get("seed", 0)]),
                              "--seeds" if seeds is not None else "sweep.seeds"),
                 baseline=baseline if baseline is not None else table.get("baseline"), metric=table.get("metric"))
    if spec.baseline is not None:
        spec.baselines()  # a baseline that names no setting is an error now, not after the runs
    return spec


def write_spec(directory: Path, spec: Sweep, cells: Sequence[Cell], command: str | None = None) -> None:
    """``sweep.toml`` and ``sweep.json``; a directory holding another sweep's cells is refused."""
    known = read_cells(directory) if (directory / CELLS).is_file() else []
    fingerprints = {c["dir"]: c["fingerprint"] for c in known}
    for cell in cells:
        old = fingerprints.get(cell.dirname)
        if old is not None and old != cell.fingerprint:
            raise ConfigError(f"sweep {directory}: cell {cell.dirname} holds a run with another config; "
                              f"choose another --out, or continue that sweep with fedcore sweep --resume {directory}")
    if not (directory / CELLS).is_file() and directory.is_dir() and any(directory.iterdir()):
        raise ConfigError(f"sweep {directory}: the directory is not empty and holds no sweep; choose another --out")
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / SPEC, spec.to_toml().encode())
    if command is None and known:
        command = read_listing(directory).get("command")  # a resumed sweep keeps the command that started it
    listing = {"name": spec.name, "command": command, "baseline": spec.baseline_label(), "metric": spec.metric,
               "seeds": spec.seeds, "baselines": spec.baselines(),
               "settings": [{"label": s.label, "dir": s.dirname, "values": s.values, "parts": s.parts}
                            for s in spec.settings()],
               "cells": [{"setting": c.setting.label, "seed": c.seed, "dir": c.dirname, "fingerprint": c.fingerprint}
                         for c in cells]}
    atomic_write(directory / CELLS, (json.dumps(listing, indent=2, default=str) + "\n").encode())


def read_cells(directory: Path) -> list[dict[str, Any]]:
    return list(read_listing(directory)["cells"])


def read_listing(directory: str | Path) -> dict[str, Any]:
    """A sweep directory's listing (``sweep.json``): its settings, seeds, cells and the command that started it."""
    directory = Path(directory)
    try:
        return dict(json.loads((directory / CELLS).read_text()))
    except FileNotFoundError:
        raise ConfigError(f"{directory}: not a fedcore sweep directory (no {CELLS})") from None
    except ValueError as exc:
        raise ConfigError(f"{directory}/{CELLS}: unreadable ({exc})") from None


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / CELLS).is_file()


__all__ = ["CELLS", "SPEC", "Cell", "Setting", "Sweep", "is_sweep_dir", "load_sweep_spec", "pair_baselines",
           "parse_grid", "read_cells", "read_listing", "write_spec"]
