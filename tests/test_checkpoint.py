"""Checkpoints: encoding without pickle, checksums and fallback, and resuming to the identical history."""
import json

import attrs
import numpy as np
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import BufferedSchedule, DirichletPartition, FedBuffStep, SGDUpdate, UniformSync
from fedcore.engine.checkpoint import (
    Checkpointer,
    CheckpointError,
    decode,
    encode,
    latest_good,
    list_checkpoints,
    read_checkpoint,
)
from fedcore.engine.loop import Engine
from fedcore.stash import StashKey
from fedcore.testing import tiny_data, tiny_model

COUNT = StashKey[int]("test.count")
SERVER_NET = StashKey[nn.Module]("test.server_net")
MEMORY = StashKey[torch.Tensor]("test.memory")


@attrs.frozen(eq=False, kw_only=True)
class Stateful:
    """Keeps state in every place a checkpoint must capture: run, server and client stashes (JSON, tensors,
    a module created at run start), and lets that state change the history."""

    @fedcore.hookimpl
    def fedcore_run_start(self, run):
        torch.manual_seed(123)
        run.server.stash[SERVER_NET] = nn.Linear(2, 1)

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx):
        ctx.run.stash[COUNT] = ctx.run.stash.get(COUNT, 0) + 1
        with torch.no_grad():
            ctx.server.stash[SERVER_NET].weight.add_(torch.rand(1, 2))  # draws from the global generator

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        state = ctx.run.client_states[client.id]
        state.stash[MEMORY] = state.stash.get(MEMORY, torch.zeros(1)) + update.metrics["loss"]

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx):
        run = ctx.run
        memory = sum(float(s.stash.get(MEMORY, torch.zeros(1))) for s in run.client_states.values())
        return {"count": run.stash[COUNT], "server_net": float(run.server.stash[SERVER_NET].weight.detach().sum()),
                "memory": memory}


class Stop(Exception):
    pass


def engine(checkpoint=None, *, rounds=4, components=None, **kwargs):
    train, test = tiny_data()
    comps = components if components is not None else [
        Stateful(), DirichletPartition(alpha=0.5, min_size=5), UniformSync(fraction=0.7),
        SGDUpdate(lr=0.1, momentum=0.9)]
    torch.manual_seed(0)
    return Engine(fedcore.Pipeline(comps), model=tiny_model(), train=train, test=test, num_clients=4, rounds=rounds,
                  seed=3, checkpoint=checkpoint, **kwargs)


def interrupted_then_resumed(tmp_path, make, stop_after: int):
    """Run until ``stop_after`` rounds are done (checkpointing each), crash, resume in a fresh engine."""
    first = make(Checkpointer(tmp_path, every=1))

    def crash(record):
        if record["round"] == stop_after:  # the row of round `stop_after` is lost with the crash
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    resumed = make(Checkpointer(tmp_path, every=1, resume=True))
    return resumed.run()


def test_encode_roundtrip_without_pickle():
    value = {"t": torch.arange(6.0).reshape(2, 3), "tuple": (1, "a", None), "ints": {3: [1.5, float("inf")]},
             "np": np.arange(4, dtype=np.uint32), "nested": [{"x": torch.ones(2, dtype=torch.int64)}]}
    tensors = {}
    encoded = encode(value, "root", tensors)
    text = json.dumps(encoded)  # JSON, tensors by reference
    back = decode(json.loads(text), tensors)
    assert torch.equal(back["t"], value["t"]) and back["tuple"] == (1, "a", None)
    assert back["ints"] == {3: [1.5, float("inf")]}
    assert back["np"].dtype == np.uint32 and back["np"].tolist() == [0, 1, 2, 3]
    assert torch.equal(back["nested"][0]["x"], torch.ones(2, dtype=torch.int64))
    with pytest.raises(CheckpointError, match=r"cannot checkpoint root/fn: a builtins.function"):
        encode({"fn": lambda: 0}, "root", {})


@attrs.frozen(kw_only=True)
class Inner:
    """A typed meta record, as a plugin's share would put into ``Share.meta``."""

    index: tuple[int, ...] = attrs.field(converter=tuple)
    weights: torch.Tensor


@attrs.frozen(kw_only=True)
class Outer:
    inner: Inner
    phase: str
    _private: int = 0
    note: dict = attrs.field(factory=dict)


def test_attrs_records_roundtrip_field_by_field_into_their_own_class():
    value = {"meta": Outer(inner=Inner(index=[2, 5], weights=torch.ones(3)), phase="mask", private=4,
                           note={7: (1, 2)})}
    tensors = {}
    text = json.dumps(encode(value, "root", tensors))
    assert f"{Outer.__module__}:Outer" in text and set(tensors) == {"root/meta/inner/weights"}  # no pickle
    back = decode(json.loads(text), tensors)["meta"]
    assert type(back) is Outer and type(back.inner) is Inner
    assert back.inner.index == (2, 5) and torch.equal(back.inner.weights, torch.ones(3))
    assert back.phase == "mask" and back._private == 4 and back.note == {7: (1, 2)}


def test_a_record_whose_class_is_not_loaded_is_one_error():
    encoded = encode(Inner(index=[1], weights=torch.zeros(1)), "root", tensors := {})
    encoded["__record__"] = "fedcore_not_installed.meta:Inner"
    with pytest.raises(CheckpointError, match=r"holds a fedcore_not_installed.meta:Inner record, a class this run "
                                              r"has not loaded"):
        decode(encoded, tensors)
    encoded["__record__"] = f"{Inner.__module__}:Inner"
    encoded["fields"]["colour"] = "red"
    with pytest.raises(CheckpointError, match=r"record does not fit its class today"):
        decode(encoded, tensors)


def test_resume_gives_the_same_history_model_and_plugin_state(tmp_path):
    full = engine().run()
    resumed = interrupted_then_resumed(tmp_path, engine, stop_after=2)
    assert resumed.history.comparable() == full.history.comparable()
    assert [r["count"] for r in resumed.history] == [1, 2, 3, 4]
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert resumed.ledger.to_rows() == full.ledger.to_rows()
    assert len(list_checkpoints(tmp_path)) == 2  # keep=2


@pytest.mark.parametrize("durable", [True, False])
def test_durable_checkpoints_fsync_and_the_others_resume_the_same(tmp_path, monkeypatch, durable):
    """``durable=False`` (the contract checks' resumes) writes the same checkpoints and journals without an fsync;
    the default fsyncs every file it writes and the folder."""
    import os

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    full = engine().run()
    first = engine(Checkpointer(tmp_path, every=1, durable=durable))

    def crash(record):
        if record["round"] == 2:
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    assert (len(synced) >= 6 * 2) if durable else not synced  # per checkpoint: 3 files, 2 journals, the folder
    resumed = engine(Checkpointer(tmp_path, every=1, resume=True, durable=durable)).run()
    assert resumed.history.comparable() == full.history.comparable()
    assert bool(synced) == durable


def test_resume_of_an_asynchronous_run_with_updates_in_flight(tmp_path):
    from fedcore.runtime import SimClock

    def make(checkpoint=None):
        comps = [DirichletPartition(alpha=0.5, min_size=5), BufferedSchedule(buffer_size=2, concurrency=3),
                 FedBuffStep(), SGDUpdate(lr=0.1)]
        return engine(checkpoint, rounds=5, components=comps, clock=SimClock(default_profile="phone"),
                      profiles=["watch", "phone", "laptop", "phone"])

    full = make().run()
    assert any(r.get("max_staleness") for r in full.history)  # stale updates were in flight
    resumed = interrupted_then_resumed(tmp_path, make, stop_after=2)
    in_flight = read_checkpoint(list_checkpoints(tmp_path)[0])[0]["runtime"]["in_flight"]
    assert in_flight and in_flight[0]["update"]["tensors"], "a checkpoint held updates still in flight"
    assert resumed.history.comparable() == full.history.comparable()


def test_corrupt_and_truncated_checkpoints_are_detected_and_skipped(tmp_path):
    engine(Checkpointer(tmp_path, every=1, keep=4)).run()
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["round-000001", "round-000002", "round-000003", "round-000004"]
    newest, second = tmp_path / names[-1], tmp_path / names[-2]
    blob = bytearray((newest / "tensors.safetensors").read_bytes())
    blob[-3] ^= 0xFF  # one flipped bit in a tensor
    (newest / "tensors.safetensors").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="tensors.safetensors does not match its checksum"):
        read_checkpoint(newest)
    state_json = (second / "state.json").read_bytes()
    (second / "state.json").write_bytes(state_json[: len(state_json) // 2])  # truncated by a crash
    path, state, _, problems = latest_good(tmp_path)
    assert path.name == "round-000002" and state["round"] == 2
    assert len(problems) == 2 and "state.json does not match its checksum" in problems[1]

    lines = []
    ck = Checkpointer(tmp_path, every=1, resume=True, report=lines.append)
    resumed = engine(ck).run()
    assert resumed.history.comparable() == engine().run().history.comparable()
    assert any("skipped" in line for line in lines) and any("falling back to round-000002" in line for line in lines)
    assert sorted(p.name.rsplit("-", 1)[0] for p in tmp_path.glob("corrupt-*")) == [
        "corrupt-round-000003", "corrupt-round-000004"]


def test_missing_file_and_leftover_temporary_directory(tmp_path):
    engine(Checkpointer(tmp_path, every=2), rounds=3).run()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["round-000002", "round-000003"]  # every 2 + the last
    (tmp_path / "round-000003" / "state.json.sha256").unlink()
    with pytest.raises(CheckpointError, match="state.json.sha256 is missing"):
        read_checkpoint(tmp_path / "round-000003")
    (tmp_path / ".tmp-round-000004-999").mkdir()  # a kill during a write
    assert latest_good(tmp_path)[0].name == "round-000002"
    Checkpointer(tmp_path)
    assert not (tmp_path / ".tmp-round-000004-999").exists()


def test_a_stash_value_that_cannot_be_saved_names_its_key(tmp_path):
    bad = StashKey[object]("test.bad")

    @attrs.frozen(eq=False)
    class Bad:
        @fedcore.hookimpl
        def fedcore_run_start(self, run):
            run.stash[bad] = object()

    with pytest.raises(CheckpointError, match=r"cannot checkpoint run/stash/test.bad: a builtins.object"):
        engine(Checkpointer(tmp_path), components=[Bad()]).run()


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    engine(Checkpointer(tmp_path), rounds=2).run()
    with pytest.raises(CheckpointError, match="rounds=2; this run has rounds=3"):
        engine(Checkpointer(tmp_path, resume=True), rounds=3).run()


def test_stash_keys_compare_by_name():
    assert StashKey("a") == StashKey("a") and hash(StashKey("a")) == hash(StashKey("a"))
    assert StashKey("a") != StashKey("b")


def test_pipeline_run_takes_a_checkpointer_and_resuming_a_finished_run_runs_nothing(tmp_path):
    train, test = tiny_data()

    def run(resume):
        torch.manual_seed(0)
        pipe = fedcore.Pipeline([SGDUpdate(lr=0.1)])
        calls = []
        result = pipe.run(model=tiny_model(), train=train, test=test, num_clients=3, rounds=2, seed=1,
                          on_round=calls.append, checkpoint=Checkpointer(tmp_path, resume=resume))
        return result, calls

    first, calls = run(resume=False)
    assert len(calls) == 2 and [p.name for p in list_checkpoints(tmp_path)] == ["round-000001", "round-000002"]
    again, calls = run(resume=True)
    assert calls == [] and again.history.comparable() == first.history.comparable()
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()))
