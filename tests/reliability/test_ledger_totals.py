"""The ledger's running totals (what every history row's ``bytes_*_total`` reads) equal a fresh sum over every
transfer of the run: while a run books several kinds both ways, under a synchronous and an asynchronous schedule,
and across a checkpoint and resume, including one that cuts the journals back past a lost checkpoint."""
import shutil

import attrs
import pytest
import torch

import fedcore
from fedcore import Ledger
from fedcore.builtin import BufferedSchedule, DirichletPartition, FedBuffStep, SGDUpdate, UniformSync
from fedcore.engine.checkpoint import JOURNALS, Checkpointer, list_checkpoints
from fedcore.engine.loop import Engine
from fedcore.network import Channel, Transfer
from fedcore.testing import tiny_data, tiny_model

KINDS = ("weights", "masks", "seeds")


def resummed(rows, direction=None, kind=None):
    """The totals as the engine computed them before they were kept: a pass over every row."""
    return sum(r.nbytes for r in rows if direction in (None, r.direction) and kind in (None, r.kind))


def check_totals(ledger: Ledger) -> None:
    rows = list(ledger.rows)
    for direction in (None, "up", "down"):
        for kind in (None, *KINDS, "absent"):
            got = ledger.total(direction=direction, kind=kind)
            assert type(got) is int and got == resummed(rows, direction, kind), (direction, kind)
    assert ledger.by_kind() == {(d, k): resummed(rows, d, k) for d, k in {(r.direction, r.kind) for r in rows}}


def test_running_totals_equal_a_fresh_sum_as_rows_are_booked_replaced_and_cut():
    ledger = Ledger()
    check_totals(ledger)
    for i in range(30):
        channel = Channel(client_id=i % 3, round=i // 3)
        channel.down("weights", torch.zeros(i + 1))
        channel.up(KINDS[i % 3], torch.zeros(2 * i + 1, dtype=torch.float16))
        ledger.book(channel)
        check_totals(ledger)
        ledger.merge([Transfer(round=i // 3, client=0, direction="up", kind="masks", nbytes=7 * i)])
        check_totals(ledger)
    ledger.rows = ledger.rows[:17]  # what a resume does: the rows its checkpoint covers
    check_totals(ledger)
    del ledger.rows[5:]  # cut in place: noticed, counted again
    check_totals(ledger)
    ledger.merge([Transfer(round=9, client=1, direction="down", kind="seeds", nbytes=3)])
    check_totals(ledger)
    assert ledger.total(direction="down", round=9, client=1) == 3  # filters by round/client still scan


@attrs.frozen(eq=False, kw_only=True)
class Audit:
    """Books extra kinds both ways each round (as a protocol does on ``ctx.run.ledger``) and checks every finished
    row's totals, and the ledger's by direction and kind, against a fresh sum over the whole ledger."""

    checked: list[int] = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx):
        ctx.run.ledger.merge([
            Transfer(round=ctx.round, client=c, direction=d, kind=k, nbytes=(ctx.round + 1) * (c + 3) * len(k))
            for c in range(2) for d, k in (("up", "masks"), ("down", "seeds"))])

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx, record):
        ledger = ctx.run.ledger
        assert record["bytes_up_total"] == resummed(ledger.rows, "up")
        assert record["bytes_down_total"] == resummed(ledger.rows, "down")
        check_totals(ledger)
        self.checked.append(ctx.round)


def make_engine(schedule: str, checkpoint=None, *, audit: Audit, rounds: int = 6):
    train, test = tiny_data()
    clock = {}
    if schedule == "sync":
        comps = [DirichletPartition(alpha=0.5, min_size=5), UniformSync(fraction=0.7), SGDUpdate(lr=0.1)]
    else:  # updates still in flight at a checkpoint: their traffic is booked rounds after their download
        from fedcore.runtime import SimClock

        comps = [DirichletPartition(alpha=0.5, min_size=5), BufferedSchedule(buffer_size=2, concurrency=3),
                 FedBuffStep(), SGDUpdate(lr=0.1)]
        clock = {"clock": SimClock(default_profile="phone"), "profiles": ["watch", "phone", "laptop", "phone"]}
    torch.manual_seed(0)
    return Engine(fedcore.Pipeline([audit, *comps]), model=tiny_model(), train=train, test=test, num_clients=4,
                  rounds=rounds, seed=3, checkpoint=checkpoint, **clock)


class Crash(Exception):
    pass


@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_row_totals_equal_a_fresh_sum_through_a_run_a_resume_and_a_resume_that_cuts_the_journals(tmp_path, schedule):
    full_audit = Audit()
    full = make_engine(schedule, audit=full_audit).run()
    assert full_audit.checked == list(range(6))
    assert {k for _, k in full.ledger.by_kind()} == set(KINDS)

    # a crash after round 3's row, resumed from the checkpoint of round 2
    first = make_engine(schedule, Checkpointer(tmp_path / "crash", every=2), audit=Audit())

    def crash(record):
        if record["round"] == 3:
            raise Crash

    first.on_round = crash
    with pytest.raises(Crash):
        first.run()
    audit = Audit()
    resumed = make_engine(schedule, Checkpointer(tmp_path / "crash", every=2, resume=True), audit=audit).run()
    assert audit.checked == [2, 3, 4, 5]
    assert resumed.history.comparable() == full.history.comparable()
    assert resumed.ledger.to_rows() == full.ledger.to_rows()

    # the newest checkpoint lost: the journals hold rows past the one the resume starts from, and are cut back
    root = tmp_path / "cut"
    make_engine(schedule, Checkpointer(root, every=2, keep=3), audit=Audit()).run()
    shutil.rmtree(list_checkpoints(root)[-1])
    ledger_lines = len((root / JOURNALS["ledger"]).read_text().splitlines())
    assert ledger_lines == len(full.ledger.rows)
    audit = Audit()
    again = make_engine(schedule, Checkpointer(root, every=2, keep=3, resume=True), audit=audit)
    cut: list[int] = []
    again.on_round = lambda record: cut.append(len((root / JOURNALS["ledger"]).read_text().splitlines()))
    result = again.run()
    assert audit.checked == [4, 5]
    assert cut[0] < ledger_lines  # the resume cut the ledger journal back to round 4's checkpoint
    assert result.history.comparable() == full.history.comparable()
    assert [(r["bytes_up_total"], r["bytes_down_total"]) for r in result.history] == \
        [(r["bytes_up_total"], r["bytes_down_total"]) for r in full.history]
