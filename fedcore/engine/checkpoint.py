"""Checkpoints of a running engine, and resuming from them.

A checkpoint is taken at a round boundary (after an aggregation) and is a directory::

    round-000012/
      tensors.safetensors   every tensor of the state (global model, client tensors, stash tensors, ...)
      state.json            everything else; tensors appear as {"__tensor__": key} references
      state.json.sha256     checksum of state.json, which records the checksum of tensors.safetensors

The history rows and the network ledger grow with the run, so they are not embedded: each is an append-only
journal next to the checkpoints (``history.jsonl``, ``ledger.jsonl``), written before the checkpoint, and a
checkpoint records how many lines of each it covers and their running sha256. A checkpoint therefore costs the
same at round 10 and at round 10,000; a resume verifies the prefix it needs and cuts the journal back to it.

It is built in a temporary directory and moved into place with ``os.replace``, so a kill leaves
either the previous checkpoints or the new one, never half of one. Nothing is unpickled on load:
tensors come from safetensors, the rest from JSON. A checkpoint whose checksums do not match is
reported and skipped; resume falls back to the newest good one.

What is captured: the global model and its version, the server's client views, stash and server-state channel
(``ServerState.aux``: shared and per-client tensors, their kinds, what is sent), every
client's tensors, stash and participation count, the run stash and settings, the network ledger,
the history, the engine's runtime state (:meth:`Engine.runtime_state`, :mod:`fedcore.engine.state`: virtual time,
busy time, updates still in flight under asynchronous schedules, and the scheduler policy's and the clock's
``state_dict()`` when they have one: a policy that keeps state across rounds must have one), and the
torch/numpy/python global random states. All per-round random
streams derive from ``(seed, round, client, purpose)``, so a run resumed at a round boundary
continues exactly as the uninterrupted run would have.

Stash values must be JSON values, tensors, numpy arrays, or objects with ``state_dict()`` and
``load_state_dict()`` (a server-side ``nn.Module`` or optimizer); for the latter, the resumed run
must create the object again (in ``fedcore_run_start``) so its state can be loaded into it.
Observers that change the global model's structure in ``fedcore_round_start`` must decide from
the round number (``>=``), not from "the round I switched", so a resumed run rebuilds the same
structure; the model's entries are then loaded right after the first resumed ``round_start``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import hashlib
import json
import logging
import os
from pathlib import Path
import random
import shutil
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import torch

from fedcore.engine.checkpoint_files import (  # re-exported: the files' names are used from here
    DIGEST,
    FORMAT,
    JOURNALS,
    STATE,
    TENSORS,
    Journal,
    list_checkpoints,
    read_checkpoint,
    round_of,
    write_checkpoint,
)
from fedcore.engine.history import History
from fedcore.engine.state_codec import CheckpointError, decode, encode, encode_stash, restore_stash
from fedcore.network import Transfer
from fedcore.types import ClientUpdate, ServerTensors

if TYPE_CHECKING:
    from fedcore.contexts import RunContext

log = logging.getLogger("fedcore")


def _partition_digest(run: RunContext) -> str:
    part = run.partition
    # lists of lists: the same text as when the partition held tuples, so older checkpoints still match
    text = json.dumps([[list(p) for p in part.train], None if part.test is None else [list(p) for p in part.test]]) \
        if part else "null"
    return hashlib.sha256(text.encode()).hexdigest()


# -- engine state ------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False)
class ResumePoint:
    """Where the loop continues: the round boundary and the wall time the run had used so far."""

    round: int
    wall_s: float


def snapshot(run: RunContext, *, history: History, runtime: Mapping[str, Any], wall_s: float, journaled: bool = False
             ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The run's state at a round boundary as ``(json_state, tensors)``; ``runtime`` is the engine's
    :meth:`~fedcore.engine.loop.Engine.runtime_state`; ``journaled``: without the history and the ledger (the
    :class:`Checkpointer` keeps them in journals)."""
    server = run.server
    tensors: dict[str, torch.Tensor] = {}
    clients = []
    for cid, cs in sorted(run.client_states.items()):
        clients.append({"id": cid, "rounds_participated": cs.rounds_participated,
                        "tensors": encode(dict(cs.tensors), f"client{cid}/tensors", tensors),
                        "stash": encode_stash(cs.stash, f"client{cid}/stash", tensors)})
    runtime = dict(runtime)
    for item in runtime.get("in_flight", []):  # ClientUpdate records -> plain dicts (tensors go to the file)
        update = item.get("update")
        if isinstance(update, ClientUpdate):
            item["update"] = {"client_id": update.client_id, "tensors": dict(update.tensors),
                              "base": dict(update.base), "num_examples": update.num_examples,
                              "metrics": dict(update.metrics), "version": update.version,
                              "staleness": update.staleness, "meta": dict(update.meta),
                              "share_signature": update.share_signature, "aux": dict(update.aux)}
    state = {
        "format": FORMAT,
        "round": server.version,
        "seed": run.seed, "num_clients": run.num_clients, "rounds": run.rounds,
        "partition": _partition_digest(run),
        "wall_s": wall_s,
        "server": {"version": server.version,
                   "model": encode(server.model.state_dict(), "server/model", tensors),
                   "client_views": encode(dict(server.client_views), "server/client_views", tensors),
                   "stash": encode_stash(server.stash, "server/stash", tensors),
                   "aux": {"shared": encode(dict(server.aux.shared), "server/aux/shared", tensors),
                           "per_client": {str(c): encode(dict(t), f"server/aux/client{c}", tensors)
                                          for c, t in sorted(server.aux.per_client.items())},
                           "kinds": dict(server.aux.kinds), "send": list(server.aux.send)}},
        "clients": clients,
        "run": {"stash": encode_stash(run.stash, "run/stash", tensors),
                "settings": encode(dict(run.settings), "run/settings", tensors)},
        "runtime": encode(runtime, "runtime", tensors),
        "rng": {"torch": encode(torch.get_rng_state(), "rng/torch", tensors),
                "numpy": encode(np.random.get_state(), "rng/numpy", tensors),
                "python": encode(random.getstate(), "rng/python", tensors)},
    }
    if not journaled:
        state["ledger"], state["history"] = run.ledger.to_rows(), list(history.rows)
    return state, tensors


def restore(run: RunContext, state: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], *, history: History,
            device: torch.device, load_runtime: Callable[[dict[str, Any]], None]) -> tuple[ResumePoint, dict | None]:
    """Put a snapshot back into a set-up run (its history, and the engine's runtime state through
    ``load_runtime``). Returns the resume point and, when the global model's entries do not match yet
    (a round-start observer changes the model), the model state to load later."""
    for key in ("seed", "num_clients", "rounds"):
        if state[key] != getattr(run, key):
            raise CheckpointError(f"the checkpoint is of a run with {key}={state[key]}; this run has "
                                  f"{key}={getattr(run, key)}")
    if state["partition"] != _partition_digest(run):
        raise CheckpointError("the checkpoint's client partition differs from this run's (another dataset, "
                              "partitioner or seed?)")
    if device.type != "cpu":  # saved on the CPU; mapped onto this run's device (a GPU run resumes on the CPU and back)
        tensors = {k: v if k.startswith("rng/") else v.to(device) for k, v in tensors.items()}
    server = run.server
    server.version = int(state["server"]["version"])
    model_state = decode(state["server"]["model"], tensors)
    pending = None if load_model_state(server.model, model_state, strict=False) else model_state
    server.client_views.clear()
    server.client_views.update({int(k): v for k, v in decode(state["server"]["client_views"], tensors).items()})
    restore_stash(server.stash, decode(state["server"]["stash"], tensors), "server")
    aux = state["server"].get("aux")  # the server-state channel (absent in checkpoints written before it existed)
    if aux is not None:
        server.aux = ServerTensors(shared=dict(decode(aux["shared"], tensors)),
                                   per_client={int(c): dict(decode(t, tensors)) for c, t in aux["per_client"].items()},
                                   kinds=dict(aux["kinds"]), send=list(aux["send"]))
    for saved in state["clients"]:
        cs = run.client_states[int(saved["id"])]
        cs.tensors = dict(decode(saved["tensors"], tensors))
        cs.rounds_participated = int(saved["rounds_participated"])
        restore_stash(cs.stash, decode(saved["stash"], tensors), f"client {saved['id']}")
    restore_stash(run.stash, decode(state["run"]["stash"], tensors), "run")
    run.settings.update(decode(state["run"]["settings"], tensors))
    run.ledger.rows = [Transfer(**r) for r in state["ledger"]]
    history.replace([dict(r) for r in state["history"]])
    runtime = decode(state["runtime"], tensors)
    for item in runtime.get("in_flight", []):
        if isinstance(item.get("update"), dict):
            item["update"] = ClientUpdate(**item["update"])
        if isinstance(item.get("upload"), list):
            item["upload"] = tuple(item["upload"])
    load_runtime(runtime)
    torch.set_rng_state(decode(state["rng"]["torch"], tensors))
    np.random.set_state(decode(state["rng"]["numpy"], tensors))
    py = decode(state["rng"]["python"], tensors)
    random.setstate((py[0], tuple(py[1]), py[2]))
    return ResumePoint(round=int(state["round"]), wall_s=float(state["wall_s"])), pending


def load_model_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor], *, strict: bool) -> bool:
    """Load a saved global model; ``False`` (or, with ``strict``, an error naming the entries) on a key mismatch."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        if strict:
            raise CheckpointError(f"the global model does not match the checkpoint: missing {missing[:6]}, "
                                  f"unexpected {unexpected[:6]} (does a round-start observer change the model "
                                  f"depending on the round it switched in, rather than on the round number?)")
        return False
    model.load_state_dict(dict(state), strict=True)
    return True


def content_problem(state: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
                    model: torch.nn.Module | None = None) -> str | None:
    """Why a checkpoint whose checksums verify must still not be loaded, or ``None``: its history must hold one row
    per aggregation it records (rounds 0..n-1), and its global model must fit ``model`` (every entry both have:
    same shape, and a floating dtype where the model's is floating; a precision change is a component's right) and
    be finite. Checksums only say the files are what was written; a checkpoint written
    by a broken run (a NaN weight) or edited with recomputed checksums is caught here, before anything loads."""
    history = state.get("history") or []
    done = int(state["server"]["version"])
    if [r.get("round") for r in history] != list(range(done)):
        return f"its history has {len(history)} rows but the checkpoint is of {done} aggregations"
    saved = decode(state["server"]["model"], tensors)
    own = model.state_dict() if model is not None else {}
    for name in sorted(saved):
        value = saved[name]
        if not isinstance(value, torch.Tensor):
            continue
        mine = own.get(name)
        if mine is not None and mine.shape != value.shape:
            return f"global model entry {name!r} has shape {tuple(value.shape)}, the model has {tuple(mine.shape)}"
        if mine is not None and mine.dtype.is_floating_point != value.dtype.is_floating_point:
            return f"global model entry {name!r} has dtype {value.dtype}, the model has {mine.dtype}"
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"global model entry {name!r} has NaN or infinite values"
    return None


def latest_good(root: str | Path, model: torch.nn.Module | None = None, journals: Mapping[str, Journal] | None = None
                ) -> tuple[Path | None, dict | None, dict | None, list[str]]:
    """The newest checkpoint that verifies and whose content fits ``model`` (:func:`content_problem`):
    ``(path, state, tensors, problems_with_newer_ones)``."""
    problems: list[str] = []
    for path in reversed(list_checkpoints(root)):
        try:
            state, tensors = read_checkpoint(path)
            for key, name in JOURNALS.items():  # journal references -> the rows, verified
                ref = state.pop(key + "_journal", None)
                if ref is not None:
                    journal = (journals or {}).get(key) or Journal(Path(root) / name)
                    state[key] = journal.read(ref, path.name)
                    state[key + "_journal"] = ref
            problem = content_problem(state, tensors, model)
        except (CheckpointError, OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(str(exc) if isinstance(exc, CheckpointError) else f"{path.name}: unreadable ({exc})")
            continue
        if problem is not None:
            problems.append(f"{path.name}: {problem}")
            continue
        return path, state, tensors, problems
    return None, None, None, problems


# -- the engine's checkpointer -----------------------------------------------------------------------------


class Checkpointer:
    """Saves the engine every ``every`` rounds (and after the last) under ``root``; resumes from the newest good one.

    The engine calls :meth:`restore` once after set-up, :meth:`round_started` after each round's
    ``round_start`` observers and :meth:`after_round` after each aggregation. ``report`` receives
    one line per notable event (a corrupt checkpoint skipped, a resume).
    """

    def __init__(self, root: str | Path, *, every: int = 1, keep: int = 2, resume: bool = False,
                 report: Callable[[str], None] | None = None, model: torch.nn.Module | None = None,
                 durable: bool = True) -> None:
        if every < 0:
            raise ValueError(f"checkpoint every={every}; must be >= 0 (0 = never)")
        if keep < 1:
            raise ValueError(f"checkpoint keep={keep}; must be >= 1")
        self.root = Path(root)
        self.every, self.keep, self.resume = every, keep, resume
        self.report = report or (lambda line: log.warning("%s", line))
        self.model = model  # checkpoints are checked against it before one is chosen (content_problem)
        self.durable = durable  # False: no fsync (contract checks of resuming; fedcore.testing.resume)
        self.journals = {key: Journal(self.root / name, durable=durable) for key, name in JOURNALS.items()}
        self._loaded: tuple[Path | None, dict | None, dict | None] | None = None
        self._pending_model: dict | None = None
        for leftover in self.root.glob(".tmp-round-*") if self.root.is_dir() else ():
            shutil.rmtree(leftover, ignore_errors=True)

    def load(self) -> tuple[Path | None, dict | None]:
        """Find (once) the checkpoint a resume starts from; reports every corrupt one it skips."""
        if self._loaded is None:
            path, state, tensors, problems = latest_good(self.root, self.model, self.journals)
            for p in problems:
                self.report(f"checkpoint skipped: {p}")
            if problems and path is not None:
                self.report(f"falling back to {path.name}")
            if self.resume:  # set bad newer checkpoints aside (kept for inspection, never loaded again)
                good_round = -1 if path is None else round_of(path)
                for old in list_checkpoints(self.root):
                    if round_of(old) > good_round:
                        os.replace(old, old.with_name(f"corrupt-{old.name}-{os.getpid()}"))
            self._loaded = (path, state, tensors)
        return self._loaded[0], self._loaded[1]

    def restore(self, run: RunContext, *, history: History, device: torch.device,
                load_runtime: Callable[[dict[str, Any]], None]) -> ResumePoint | None:
        if not self.resume:
            return None
        path, state = self.load()
        if path is None:
            self.report("no usable checkpoint; starting from round 0")
            return None
        assert state is not None and self._loaded is not None and self._loaded[2] is not None
        if self.model is None:  # not given at construction: the content is checked against the run's model now
            problem = content_problem(state, self._loaded[2], run.server.model)
            if problem is not None:
                raise CheckpointError(f"{path.name}: {problem}")
        for key, journal in self.journals.items():
            if key + "_journal" in state:
                journal.cut_to(state[key + "_journal"])
        point, self._pending_model = restore(run, state, self._loaded[2], history=history, device=device,
                                             load_runtime=load_runtime)
        self._loaded = (path, state, None)  # the tensors now live in the engine
        return point

    def round_started(self, run: RunContext) -> None:
        if self._pending_model is not None:
            load_model_state(run.server.model, self._pending_model, strict=True)
            self._pending_model = None

    def after_round(self, run: RunContext, *, history: History, runtime: Callable[[], Mapping[str, Any]],
                    wall_s: float) -> Path | None:
        """Save the run if this round is due; ``runtime`` gives the engine's runtime state (asked only then)."""
        done = run.server.version
        if self.every == 0 or (done % self.every and done != run.rounds):
            return None
        state, tensors = snapshot(run, history=history, runtime=runtime(), wall_s=wall_s,
                                  journaled=bool(self.journals))
        if self.journals:  # the journals first: a checkpoint never refers past them
            state["history_journal"] = self.journals["history"].append(history.rows)
            state["ledger_journal"] = self.journals["ledger"].append(run.ledger.rows, attrs.asdict)
        path = write_checkpoint(self.root, state, tensors, durable=self.durable)
        for old in list_checkpoints(self.root)[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return path


__all__ = ["DIGEST", "FORMAT", "JOURNALS", "STATE", "TENSORS", "Checkpointer", "Journal", "ResumePoint",
           "content_problem", "latest_good", "list_checkpoints", "load_model_state", "read_checkpoint", "restore",
           "round_of", "snapshot", "write_checkpoint"]
