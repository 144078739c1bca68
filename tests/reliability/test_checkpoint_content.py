"""Checkpoints validated beyond checksums (issue 29, item 5): a checkpoint re-written with valid checksums but a NaN
weight, a changed tensor shape or a cut history is skipped with one line saying why, and the resume falls back to
the previous good one and gives the uninterrupted history; a run whose last rounds all refused every update ends
``failed``. In-process (the battery's storage fixture)."""
import math

import attrs
from battery import comparable, rows_of, status_of
import pytest
from test_storage import (
    STORAGE_RUNS,
    crashed_at,
    reference,  # noqa: F401 - the storage cases' fixture, used by name
    resume,
)
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate, UniformSync
from fedcore.engine.checkpoint import list_checkpoints, read_checkpoint, write_checkpoint
from fedcore.testing import run_tiny_pipeline


def _model_key(tensors, floating=True):
    return next(k for k in sorted(tensors) if "server" in k and "model" in k and "weight" in k
                and tensors[k].is_floating_point() == floating)


def _nan_weight(state, tensors):
    tensors[_model_key(tensors)][0] = math.nan


def _changed_shape(state, tensors):
    key = _model_key(tensors)
    tensors[key] = torch.zeros(tensors[key].shape[0] + 1, *tensors[key].shape[1:])


def _cut_history(state, tensors):
    """The history journal (checkpoints/history.jsonl) loses its last row: the newest checkpoint is not covered."""
    journal = state["_root"] / state["history_journal"]["file"]
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:state["history_journal"]["rows"] - 1]))
    return False


EDITS = {"nan-weight": (_nan_weight, "NaN or infinite"), "shape": (_changed_shape, "has shape"),
         "cut-history": (_cut_history, "not the")}


@STORAGE_RUNS
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_checkpoint_with_good_checksums_but_bad_content_is_skipped_and_the_resume_is_exact(tmp_path, capsys,
                                                                                            reference, edit):  # noqa: F811
    config, expected = reference
    run_dir = tmp_path / "run"
    crashed_at(config, run_dir, 3)
    newest, previous = list_checkpoints(run_dir / "checkpoints")[-2:][::-1]
    state, tensors = read_checkpoint(newest)
    change, why = EDITS[edit]
    if change({**state, "_root": run_dir / "checkpoints"}, tensors) is not False:
        write_checkpoint(run_dir / "checkpoints", state, dict(tensors))  # checksums recomputed: they verify
        read_checkpoint(newest)
    err = resume(run_dir, capsys)
    skipped = [line for line in err.splitlines() if "checkpoint skipped" in line]
    assert len(skipped) == 1 and newest.name in skipped[0] and why in skipped[0], err
    assert f"resumed from {previous.name}" in err and "Traceback" not in err
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert status_of(run_dir)["state"] == "finished"


@attrs.frozen(eq=False, kw_only=True)
class PoisonFrom:
    """SGD, but from round ``start`` on every client's update carries a NaN: every later round is rejected."""

    start: int
    inner: SGDUpdate = attrs.field(factory=lambda: SGDUpdate(lr=0.1))

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        update = self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
        if ctx.round < self.start:
            return update
        return attrs.evolve(update, tensors={k: v * math.nan if v.is_floating_point() else v
                                             for k, v in update.tensors.items()})


def test_a_run_whose_rounds_are_all_rejected_from_some_point_on_fails():
    result = run_tiny_pipeline([PoisonFrom(start=1), UniformSync(fraction=1.0), FedAvg()], rounds=4)
    rows = result.history.rows
    assert rows[0].get("clients") and all(r.get("rejected") and not r["clients"] for r in rows[1:])
    assert "the last 3 rounds of 4 applied no client update" in result.history.failure()
    healthy = run_tiny_pipeline([PoisonFrom(start=4), UniformSync(fraction=1.0), FedAvg()], rounds=4)
    assert healthy.history.failure() is None
    one_bad = run_tiny_pipeline([PoisonFrom(start=3), UniformSync(fraction=1.0), FedAvg()], rounds=4)
    assert one_bad.history.failure() is None  # a single refused last round is reported in its row, not a failure


def test_a_checkpoint_references_the_history_and_ledger_journals_instead_of_embedding_them(tmp_path):
    """Item 8: state.json holds line counts and checksums of checkpoints/history.jsonl and ledger.jsonl, so its size
    does not grow with the rounds (benchmarks/checkpoint_history.py measures it at 10^4 rounds)."""
    import json

    from fedcore.engine.checkpoint import JOURNALS, STATE, Checkpointer

    result = run_tiny_pipeline([PoisonFrom(start=99), UniformSync(fraction=1.0), FedAvg()], rounds=5,
                               checkpoint=Checkpointer(tmp_path, every=1, keep=5))
    sizes = []
    for n, path in enumerate(list_checkpoints(tmp_path), start=1):
        state = json.loads((path / STATE).read_text())
        assert "history" not in state and "ledger" not in state
        assert state["history_journal"]["rows"] == n
        assert state["ledger_journal"]["rows"] == len(result.ledger.rows) * n // 5
        sizes.append(len(json.dumps({k: v for k, v in state.items() if k not in ("wall_s",)})))
    assert max(sizes) - min(sizes) < 64  # digits of counters may grow; rows may not
    assert len((tmp_path / JOURNALS["history"]).read_text().splitlines()) == 5
