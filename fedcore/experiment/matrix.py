"""The recipe matrix: every installed recipe under every scheduler, a few micro rounds each.

A cell *works* (its rounds complete, every row aggregates at least one client, no NaN/Inf in any number,
no client failed), is *refused* when its pipeline is built (one line: a component's
``fedcore_check_pipeline`` or a slot check raised ``ConfigError``), or is *broken*: it crashed, or it ran but
a row shows a fault. Recipes are found in the registry, so a newly installed one is covered without naming
it; each runs on its own micro setup (:attr:`fedcore.recipes.Recipe.test_setup`).

    python -m fedcore.experiment.matrix --write docs/recipes.md     # regenerate the table in the docs
    python -m fedcore.experiment.matrix --recipe fedavg             # one row, printed
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
import math
from pathlib import Path
import time
from typing import Any

import attrs

from fedcore.errors import ConfigError, FedcoreError

SCHEDULERS: Mapping[str, Mapping[str, Any]] = {
    "uniform": {"name": "uniform"},
    "async": {"name": "async", "concurrency": 2},
    "buffered": {"name": "buffered", "buffer_size": 2, "concurrency": 3},
    "semi-async": {"name": "semi-async", "mu": 0.5},
}
"""The four schedulers, with settings valid for a micro population (3-4 clients): the matrix's columns."""

ASYNC_COLUMNS = ("async", "buffered", "semi-async")
"""Columns that run on heterogeneous devices with a virtual clock, so updates arrive out of order and stale ones are
merged; a working cell of these columns must show a stale update (staleness > 0) in its history."""

DEVICES: Mapping[str, Any] = {"clock": {"efficiency": 1.0}, "profiles": {"weights": {"tl-medium": 1, "tl-high": 1}}}
"""The asynchronous columns' devices: half the clients on the ``tl-medium`` profile, half on ``tl-high`` (twice the
FLOP rate, the same links; fedcore.runtime.presets), with virtual time from each job's measured FLOPs and bytes: the
fast half's updates overtake the slow half's, which arrive stale. (A phone/laptop mix is 4x apart on the uplink:
with μ = 0.5 a phone's update of a ViT never arrived within the cell's rounds.)"""

ROUNDS: Mapping[str, int] = {"uniform": 2, "async": 2, "buffered": 2, "semi-async": 2}
"""Aggregations per cell: two losses for a loss change to show and, in the asynchronous columns, a stale update (every
working asynchronous cell merges its first stale update in its second aggregation; with 3, 5, 4 and 4 aggregations
each cell gave the same verdict). A recipe's later phases under these schedulers are the plugins' own tests (e.g.
SA-FedLoRA's stage switch with stale updates: fedcore-safedlora's tests/test_async_shares.py)."""

FAULT_KEYS = ("failed", "aggregate_fault", "round_failed")
"""History-row events that mean work was lost to an error: a client's job raised, the engine refused the aggregate
(NaN/Inf, a negative variance) or no client update reached aggregation."""
NOTED_KEYS = ("rejected", "dropped", "cancelled", "lost")
"""Events a cell may show, counted in its table entry: work a component or the scheduler declined, by a stated rule."""

BEGIN, END = "<!-- recipe-matrix: begin -->", "<!-- recipe-matrix: end -->"

_COSTS: dict[str, Any] = {}
"""One cost model (``fedcore.runtime.cost_model.CostModel``) per recipe, shared by its cells' clocks in this process:
a recipe's shares are the same in every column (the cost model keys a measurement by the share's structure and input
shape), so the three asynchronous columns measure them once, not three times."""


@attrs.frozen(kw_only=True)
class Cell:
    """One recipe under one scheduler: ``status`` is works, refused or broken; ``detail`` says why or what."""

    recipe: str
    scheduler: str
    status: str
    detail: str = ""
    rows: tuple[Mapping[str, Any], ...] = ()
    seconds: float = 0.0

    @property
    def max_staleness(self) -> int:
        """The largest staleness of an update this cell merged (0: every update was fresh)."""
        return max((int(r.get("max_staleness") or 0) for r in self.rows), default=0)

    @property
    def clients_aggregated(self) -> int:
        """How many distinct clients had an update merged."""
        return len({c for r in self.rows for c in r.get("clients") or ()})

    @property
    def loss_change(self) -> tuple[float, float] | None:
        """(first, last) test loss over the evaluated rows (train loss if none was evaluated): did training move
        the model? None without two losses."""
        for key in ("test_loss", "train_loss"):
            values = [float(r[key]) for r in self.rows if isinstance(r.get(key), (int, float))]
            if len(values) >= 2:
                return values[0], values[-1]
        return None


def installed_recipes() -> list[str]:
    import fedcore

    return fedcore.plugins.registry().names("recipe")


def cell_config(recipe: str, scheduler: str, *, rounds: int | None = None) -> dict[str, Any]:
    """The experiment config of one cell: the recipe's micro setup, its schedule slot replaced; the asynchronous
    columns on heterogeneous devices with a virtual clock (:data:`DEVICES`)."""
    from fedcore.recipes import get_recipe

    setup = get_recipe(recipe).micro_config()
    pipeline = dict(setup.pop("pipeline", {}))
    pipeline["schedule"] = dict(SCHEDULERS[scheduler])
    devices = {k: dict(v) for k, v in DEVICES.items()} if scheduler in ASYNC_COLUMNS else {}
    return {"name": f"matrix-{recipe}-{scheduler}", "seed": 0, "rounds": rounds or ROUNDS[scheduler], "threads": 1,
            "recipe": recipe, "pipeline": pipeline, **setup, **devices}


def column_problem(cell: Cell) -> str | None:
    """What a working cell failed to show that its column claims to test (None when nothing)."""
    if cell.scheduler in ASYNC_COLUMNS and cell.max_staleness == 0:
        return f"no stale update was merged in {len(cell.rows)} aggregations (the column tests staleness)"
    if cell.scheduler == "buffered" and cell.clients_aggregated < 2:
        return f"only {cell.clients_aggregated} client was ever aggregated"
    return None


def row_problem(rows: Sequence[Mapping[str, Any]], rounds: int) -> str | None:
    """What is wrong with a cell's history (None when nothing is)."""
    if len(rows) != rounds:
        return f"{len(rows)} of {rounds} rounds recorded"
    for row in rows:
        where = f"round {row.get('round')}"
        if not row.get("clients"):
            return f"{where} aggregated no client"
        for key in FAULT_KEYS:
            if row.get(key):
                return f"{where}: {key} {row[key]}"
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                return f"{where}: {key} = {value}"
    return None


def run_cell(recipe: str, scheduler: str, *, rounds: int | None = None) -> Cell:
    """Plan (refusals happen here), build and run one cell, then check its history rows and what its column
    claims to test (:func:`column_problem`)."""
    rounds = rounds or ROUNDS[scheduler]
    from fedcore.experiment.build import materialize, plan
    from fedcore.experiment.config import load_config

    start = time.perf_counter()
    config = load_config(None, base=cell_config(recipe, scheduler, rounds=rounds))
    try:
        checked = plan(config)
    except ConfigError as exc:
        text = str(exc).strip()
        if "\n" in text or not text:
            return Cell(recipe=recipe, scheduler=scheduler, status="broken",
                        detail=f"refused without one clear line: {text!r}")
        return Cell(recipe=recipe, scheduler=scheduler, status="refused", detail=text.removeprefix("pipeline: "),
                    seconds=time.perf_counter() - start)
    try:
        m = materialize(checked)
        clock = m.run_kwargs.get("clock")
        if clock is not None and hasattr(clock, "model"):  # a SimClock: measure each share shape once per recipe
            clock.model = _COSTS.setdefault(recipe, clock.model)
        result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
        rows = tuple(dict(r) for r in result.history.rows)
    except (Exception, FedcoreError) as exc:  # noqa: BLE001 - a crash of any kind is what the matrix reports
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Cell(recipe=recipe, scheduler=scheduler, status="broken", detail=f"{type(exc).__name__}: {line}",
                    seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    problem = row_problem(rows, rounds)
    if problem:
        return Cell(recipe=recipe, scheduler=scheduler, status="broken", detail=problem, rows=rows, seconds=seconds)
    noted = {k: sum(len(r.get(k) or ()) for r in rows) for k in NOTED_KEYS}
    detail = ", ".join(f"{n} {k}" for k, n in noted.items() if n)
    cell = Cell(recipe=recipe, scheduler=scheduler, status="works", detail=detail, rows=rows, seconds=seconds)
    missing = column_problem(cell)
    return attrs.evolve(cell, status="broken", detail=missing) if missing else cell


def run_matrix(recipes: Iterable[str] | None = None, schedulers: Iterable[str] | None = None, *,
               rounds: int | None = None) -> list[Cell]:
    """Every cell of ``recipes`` (default: all installed) x ``schedulers`` (default: all four)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [run_cell(r, s, rounds=rounds) for r in (recipes or installed_recipes())
                for s in (schedulers or SCHEDULERS)]
    finally:
        torch.set_num_threads(threads)


def markdown(cells: Sequence[Cell]) -> str:
    """The matrix as a markdown table: a row per recipe, a column per scheduler."""
    import fedcore

    schedulers = list(dict.fromkeys(c.scheduler for c in cells))
    recipes = list(dict.fromkeys(c.recipe for c in cells))
    by = {(c.recipe, c.scheduler): c for c in cells}
    registry = fedcore.plugins.registry()
    lines = ["| recipe | distribution | " + " | ".join(schedulers) + " |",
             "|---|---|" + "---|" * len(schedulers)]
    for r in recipes:
        dist = registry.get(r, "recipe").distribution or "-"
        entries = []
        for s in schedulers:
            c = by.get((r, s))
            if c is None:
                entries.append("-")
                continue
            text = {"works": "works", "refused": "refused", "broken": "**BROKEN**"}[c.status]
            if c.status == "works":
                text += _measured(c)
            if c.detail:
                text += ": " + c.detail.replace("|", "\\|")
            entries.append(text)
        lines.append(f"| `{r}` | {dist} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def _measured(c: Cell) -> str:
    """What a working cell saw: the loss change, and in the asynchronous columns the largest staleness merged."""
    parts = []
    change = c.loss_change
    if change is not None:
        parts.append(f"loss {change[0]:.4f}→{change[1]:.4f}")
    if c.scheduler in ASYNC_COLUMNS:
        parts.append(f"staleness ≤ {c.max_staleness}")
    return f" ({', '.join(parts)})" if parts else ""


def write_into(path: Path, table: str) -> None:
    """Replace the text between the matrix markers of ``path`` with ``table`` (the page keeps its prose)."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise ConfigError(f"{path} has no {BEGIN} ... {END} markers to write the matrix between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", action="append", help="only these recipes (default: every installed one)")
    parser.add_argument("--scheduler", action="append", choices=list(SCHEDULERS), help="only these schedulers")
    parser.add_argument("--rounds", type=int, default=None, help="aggregations per cell (default: ROUNDS per column)")
    parser.add_argument("--write", metavar="PAGE.md", help="write the table between the page's matrix markers")
    args = parser.parse_args(argv)
    cells = run_matrix(args.recipe, args.scheduler, rounds=args.rounds)
    table = markdown(cells)
    if args.write:
        write_into(Path(args.write), table)
        print(f"wrote the {len(cells)}-cell matrix into {args.write}")
    else:
        print(table)
    return 1 if any(c.status == "broken" for c in cells) else 0


if __name__ == "__main__":
    raise SystemExit(main())
