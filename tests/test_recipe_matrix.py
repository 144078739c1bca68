"""Every installed recipe under every scheduler, a few micro rounds (issue 10, "Done when").

Recipes come from the registry, so one a plugin adds is covered without being named here; each runs on its
own micro setup (``Recipe.test_setup``). A cell works (rounds complete, every row aggregates a client, no
NaN, no failed client) or is refused with one line when its pipeline is built; anything else fails. The
table in docs/recipes.md must be what ``python -m fedcore.experiment.matrix --write docs/recipes.md`` writes.

``FEDCORE_MATRIX_SCHEDULERS=uniform,async`` runs only those columns (a fast subset; the docs check is then skipped).
"""
from __future__ import annotations

import os
from pathlib import Path
import re

import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg
from fedcore.experiment import matrix
from fedcore.recipes import Recipe
from fedcore.scheduling import is_asynchronous

ROOT = Path(__file__).resolve().parents[1]
SCHEDULERS = [s for s in os.environ.get("FEDCORE_MATRIX_SCHEDULERS", ",".join(matrix.SCHEDULERS)).split(",") if s]
CELLS: dict[tuple[str, str], matrix.Cell] = {}
"""Cells already run in this session (the docs check reuses them instead of running the matrix twice)."""

pytestmark = pytest.mark.xdist_group("recipe-matrix")  # under xdist: one worker runs the cells and the docs check


def cell(recipe: str, scheduler: str) -> matrix.Cell:
    if (recipe, scheduler) not in CELLS:
        CELLS[(recipe, scheduler)] = matrix.run_matrix([recipe], [scheduler])[0]
    return CELLS[(recipe, scheduler)]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("recipe", matrix.installed_recipes())
@pytest.mark.slow
def test_cell_works_or_is_refused_in_one_line(recipe, scheduler):
    c = cell(recipe, scheduler)
    assert c.status in ("works", "refused"), f"{recipe} under {scheduler}: {c.detail}"
    if c.status == "refused":
        assert c.detail and "\n" not in c.detail and not c.rows
    else:
        assert len(c.rows) == matrix.ROUNDS[scheduler] and all(row["clients"] for row in c.rows)
        assert all(row["num_examples"] > 0 for row in c.rows)
        if scheduler in matrix.ASYNC_COLUMNS:  # what the column claims to test, seen in the history
            assert c.max_staleness > 0, f"{recipe} under {scheduler} never merged a stale update"


@pytest.mark.skipif(SCHEDULERS != list(matrix.SCHEDULERS), reason="FEDCORE_MATRIX_SCHEDULERS runs a subset")
@pytest.mark.slow
def test_the_docs_table_is_the_generated_one():
    cells = [cell(r, s) for r in matrix.installed_recipes() for s in matrix.SCHEDULERS]
    page = (ROOT / "docs" / "recipes.md").read_text()
    table = page.split(matrix.BEGIN, 1)[1].split(matrix.END, 1)[0].strip()
    assert table == matrix.markdown(cells), ("docs/recipes.md is stale: run "
                                             "python -m fedcore.experiment.matrix --write docs/recipes.md")
    rows = {line.split(" | ")[0]: line.split(" | ")[2:] for line in table.splitlines()[2:]}
    assert all(a != b for a, b in zip(rows["| `promptprox`"], rows["| `promptfl`"])), \
        "promptprox and promptfl must differ in every cell of the table"


def test_the_schedule_slot_is_replaced_and_the_recipe_kept():
    config = matrix.cell_config("fedprox", "buffered")
    assert config["recipe"] == "fedprox" and config["pipeline"]["schedule"]["name"] == "buffered"
    assert config["dataset"]["name"] == "synthetic"  # MICRO_SETUP: fedprox declares no test setup
    prompt = matrix.cell_config("promptper", "async")
    assert prompt["model"] == {"name": "open_clip", "n_ctx": 4, "n_personal": 2}
    assert prompt["pipeline"]["local_update"] == {"epochs": 2, "lr": 0.05}
    assert prompt["pipeline"]["schedule"]["name"] == "async"
    assert prompt["profiles"] == {"weights": {"tl-medium": 1, "tl-high": 1}} and prompt["clock"] == {"efficiency": 1.0}
    assert "profiles" not in matrix.cell_config("fedprox", "uniform")  # the synchronous column keeps its setup


# -- the matrix can fail: a refusal, a NaN aggregate, a crash --------------------------------------------------


@attrs.frozen(eq=False, kw_only=True)
class SyncOnly:
    """Refuses asynchronous schedules when the pipeline is built."""

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline):
        if is_asynchronous(pipeline.provider("schedule")):
            raise fedcore.ConfigError("sync-only needs a synchronous schedule")


@attrs.frozen(eq=False, kw_only=True)
class NaNMean(FedAvg):
    """FedAvg that poisons the model with NaN: a fault the history shows."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        result = FedAvg.fedcore_aggregate(self, model, updates, ctx)
        return attrs.evolve(result, state={k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
                                           for k, v in result.state.items()})


@attrs.frozen(eq=False, kw_only=True)
class Crash(FedAvg):
    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        raise RuntimeError("boom")


@pytest.fixture
def test_recipes():
    registry = fedcore.plugins.registry()
    registry.add("matrix-test.sync-only", SyncOnly)
    registry.add("matrix-test.nan-mean", NaNMean)
    registry.add("matrix-test.crash", Crash)
    registry.add_recipe("matrix-test.sync", Recipe(slots={"aggregate": "fedavg"}, plugins=("matrix-test.sync-only",)))
    registry.add_recipe("matrix-test.nan", Recipe(slots={"aggregate": "matrix-test.nan-mean"}))
    registry.add_recipe("matrix-test.crash", Recipe(slots={"aggregate": "matrix-test.crash"}))
    yield
    fedcore.plugins.refresh()  # forget the test-only names


def test_refusal_nan_and_crash_are_told_apart(test_recipes):
    assert "matrix-test.sync" in matrix.installed_recipes()  # found in the registry, never named by the matrix
    sync = {c.scheduler: c for c in matrix.run_matrix(["matrix-test.sync"])}
    assert sync["uniform"].status == "works" and len(sync["uniform"].rows) == matrix.ROUNDS["uniform"]
    for s in ("async", "buffered", "semi-async"):
        assert sync[s].status == "refused" and sync[s].detail.endswith("sync-only needs a synchronous schedule")
    nan = matrix.run_cell("matrix-test.nan", "uniform")
    assert nan.status == "broken" and "nan" in nan.detail.lower()  # seen in a row, or refused by the engine
    crash = matrix.run_cell("matrix-test.crash", "uniform")
    assert crash.status == "broken" and crash.detail == "RuntimeError: boom"
    table = matrix.markdown([*sync.values(), nan, crash])
    assert re.search(r"\| `matrix-test.sync` \| - \| works \(loss [0-9.]+→[0-9.]+\) \| refused: ", table)
    assert table.count("**BROKEN**") == 2


def test_row_problems():
    good = [{"round": 0, "clients": [0, 1], "test_loss": 0.5}, {"round": 1, "clients": [1], "test_loss": 0.4}]
    assert matrix.row_problem(good, 2) is None
    assert matrix.row_problem(good[:1], 2) == "1 of 2 rounds recorded"
    assert matrix.row_problem([good[0], {"round": 1, "clients": []}], 2) == "round 1 aggregated no client"
    assert matrix.row_problem([good[0], {**good[1], "failed": [3]}], 2) == "round 1: failed [3]"
    assert matrix.row_problem([good[0], {**good[1], "test_loss": float("inf")}], 2) == "round 1: test_loss = inf"


def test_write_into_keeps_the_prose(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(f"intro\n{matrix.BEGIN}\nold\n{matrix.END}\noutro\n")
    matrix.write_into(page, "| new |")
    assert page.read_text() == f"intro\n{matrix.BEGIN}\n| new |\n{matrix.END}\noutro\n"
    page.write_text("no markers")
    with pytest.raises(fedcore.ConfigError, match="markers"):
        matrix.write_into(page, "| new |")


# -- the matrix tests what it claims: stale updates, several buffered clients, learning --------------------------


def test_an_async_cell_that_never_merges_a_stale_update_fails_the_matrix(monkeypatch):
    """Without the devices and the clock every job arrives at once and nothing is ever stale: the cell is broken."""
    monkeypatch.setattr(matrix, "DEVICES", {})
    c = matrix.run_cell("fedavg", "async")
    assert c.status == "broken" and c.max_staleness == 0
    assert c.detail == (f"no stale update was merged in {matrix.ROUNDS['async']} aggregations (the column tests "
                        "staleness)")
    assert "**BROKEN**: no stale update" in matrix.markdown([c])


def test_column_problems_staleness_and_buffered_clients():
    fresh = [{"round": i, "clients": [0, 0]} for i in range(3)]
    stale = [*fresh[:2], {"round": 2, "clients": [1, 2], "max_staleness": 2}]
    sync = matrix.Cell(recipe="r", scheduler="uniform", status="works", rows=tuple(fresh))
    assert matrix.column_problem(sync) is None
    assert matrix.column_problem(matrix.Cell(recipe="r", scheduler="semi-async", status="works", rows=tuple(fresh))
                                 ).startswith("no stale update was merged in 3 aggregations")
    assert matrix.column_problem(matrix.Cell(recipe="r", scheduler="buffered", status="works",
                                             rows=tuple(fresh[:2]) + ({**fresh[2], "max_staleness": 1},))
                                 ) == "only 1 client was ever aggregated"
    ok = matrix.Cell(recipe="r", scheduler="buffered", status="works", rows=tuple(stale))
    assert matrix.column_problem(ok) is None and ok.max_staleness == 2 and ok.clients_aggregated == 3


def test_each_cell_reports_learning_and_promptprox_differs_from_promptfl():
    fedavg = cell("fedavg", "uniform")
    first, last = fedavg.loss_change
    assert last < first, "two local steps a round for two rounds must lower the micro task's loss"
    assert f"works (loss {first:.4f}→{last:.4f})" in matrix.markdown([fedavg])
    prox, plain = cell("promptprox", "uniform"), cell("promptfl", "uniform")
    assert prox.status == plain.status == "works"
    assert [r["test_loss"] for r in prox.rows] != [r["test_loss"] for r in plain.rows], \
        "the proximal term acts from the second local step: promptprox must differ from promptfl"
    assert matrix.markdown([prox]).split(" | ")[-1] != matrix.markdown([plain]).split(" | ")[-1], \
        "the generated table must show them apart"
