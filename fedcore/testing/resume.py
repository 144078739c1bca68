"""Contract checks that a component's state survives a checkpoint, for every component whatever its slot.

State kept on the component object, or stashed in a form the checkpoint codec changes (a namedtuple
that comes back a tuple, a numpy scalar that comes back a Python float, a ``defaultdict``), resumes
silently wrong. These checks catch both: the stashes of a tiny run go through the codec exactly as a
checkpoint stores them, and a run interrupted after one round and resumed must equal the one never
interrupted, history and final model included. Their checkpoints skip the fsyncs (``durable=False``): what
is checked is the codec and the resume, not a power cut (tests/reliability runs the durable files).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
import json
import math
import tempfile
from typing import Any

import numpy as np
import torch

from fedcore.engine.checkpoint import Checkpointer
from fedcore.engine.history import RunResult
from fedcore.engine.state_codec import StateDictValue, decode, encode_stash
from fedcore.testing.fixtures import ContractFixture, run_tiny_pipeline


class _Interrupt(Exception):
    """Stands for a crash of the run right after a round's checkpoint was written."""


class _CrashAfterCheckpoint(Checkpointer):
    """A checkpointer whose run crashes as soon as the checkpoint of round ``crash_after`` is on disk: the rounds
    a real crash would lose after it are never run (a resume recomputes them from the checkpoint anyway)."""

    def __init__(self, root: str, *, crash_after: int) -> None:
        super().__init__(root, every=1, durable=False)
        self.crash_after = crash_after

    def after_round(self, run: Any, *, history: Any, runtime: Any, wall_s: float) -> Any:
        path = super().after_round(run, history=history, runtime=runtime, wall_s=wall_s)
        if path is not None and run.server.version > self.crash_after:
            raise _Interrupt
        return path


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if torch.equal(a, b):  # equal everywhere, so no NaN anywhere: the NaN-aware comparison below says the same
        return True
    if not a.is_floating_point():
        return False
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()])


def assert_same_value(before: Any, after: Any, where: str) -> None:
    """``after`` (decoded from a checkpoint) is ``before`` exactly: same types, dtypes, shapes and values."""
    if isinstance(after, StateDictValue):
        assert callable(getattr(before, "state_dict", None)), f"{where}: came back as a state_dict of {after.type}"
        assert_same_value(before.state_dict(), after.state, where)
        return
    if isinstance(before, torch.Tensor):
        assert isinstance(after, torch.Tensor) and _same_tensor(before, after), \
            f"{where}: the tensor ({before.dtype}, {tuple(before.shape)}) changed in the checkpoint"
        return
    if isinstance(before, np.ndarray):
        assert isinstance(after, np.ndarray) and before.dtype == after.dtype and before.shape == after.shape \
            and np.array_equal(before, after, equal_nan=before.dtype.kind in "fc"), \
            f"{where}: the numpy array ({before.dtype}, {before.shape}) changed in the checkpoint"
        return
    if isinstance(before, Mapping):
        assert type(before) in (dict, OrderedDict), \
            f"{where}: a {type(before).__name__} comes back from a checkpoint as a plain dict; stash a dict"
        assert isinstance(after, dict) and list(before) == list(after), \
            f"{where}: the keys changed in the checkpoint: {list(before)[:6]} -> {after!r:.200}"
        for k in before:
            assert_same_value(before[k], after[k], f"{where}[{k!r}]")
        return
    assert type(before) is type(after), (f"{where}: a {type(before).__module__}.{type(before).__qualname__} comes back "
                                         f"from a checkpoint as a {type(after).__name__}; stash plain values")
    if isinstance(before, (list, tuple)):
        assert len(before) == len(after), f"{where}: the length changed in the checkpoint"
        for i, (x, y) in enumerate(zip(before, after)):
            assert_same_value(x, y, f"{where}[{i}]")
        return
    same = before == after or (isinstance(before, float) and math.isnan(before) and math.isnan(after))
    assert same, f"{where}: {before!r} comes back from a checkpoint as {after!r}"


def _round_trip(stash: Any, where: str) -> dict[str, Any]:
    """The stash through the codec as a checkpoint stores it: JSON text plus a safetensors blob."""
    from safetensors.torch import load, save

    tensors: dict[str, torch.Tensor] = {}
    text = json.dumps(encode_stash(stash, where, tensors))
    blob = load(save(tensors)) if tensors else {}
    decoded: dict[str, Any] = decode(json.loads(text), blob)
    return decoded


ROUNDS = 2
_last: list[tuple[Any, ContractFixture, RunResult]] = []


def _straight_run(component: Any, fixture: ContractFixture) -> RunResult:
    """The uninterrupted tiny run both checks start from (the last one is kept: the checks run back to back)."""
    if _last and _last[0][0] is component and _last[0][1] is fixture:
        return _last[0][2]
    result = run_tiny_pipeline([component], rounds=ROUNDS, fixture=fixture)
    _last[:] = [(component, fixture, result)]
    return result


def check_stash_survives_checkpoint(component: Any, fixture: ContractFixture) -> None:
    """After a two-round run, every run, server and client stash value decodes from the codec unchanged."""
    run = _straight_run(component, fixture).run
    stashes = {"run": run.stash, "server": run.server.stash,
               **{f"client{c}": s.stash for c, s in sorted(run.client_states.items())}}
    for where, stash in stashes.items():
        back = _round_trip(stash, where)
        for key, value in stash.items():
            assert key.name in back, f"{where} stash key {key.name!r} is missing after the checkpoint"
            assert_same_value(value, back[key.name], f"{where} stash {key.name!r}")


def _comparable(result: RunResult) -> tuple[str, dict[str, torch.Tensor]]:
    rows = json.dumps(result.history.comparable(), sort_keys=True, default=repr)
    return rows, {k: v.detach().clone() for k, v in result.model.state_dict().items()}


def check_resume_equals_uninterrupted(component: Any, fixture: ContractFixture) -> None:
    """Two rounds straight equal one round, a crash, and a resume from its checkpoint (rows and weights)."""
    rounds = ROUNDS
    straight_rows, straight_model = _comparable(_straight_run(component, fixture))

    with tempfile.TemporaryDirectory(prefix="fedcore-resume-check-") as root:
        try:  # round 0 and its checkpoint, then the crash
            run_tiny_pipeline([component], rounds=rounds, fixture=fixture,
                              checkpoint=_CrashAfterCheckpoint(root, crash_after=0))
        except _Interrupt:
            pass
        resumed = run_tiny_pipeline([component], rounds=rounds, fixture=fixture,
                                    checkpoint=Checkpointer(root, every=1, resume=True, durable=False))
    rows, model = _comparable(resumed)
    assert rows == straight_rows, "the resumed run's history differs from the uninterrupted run's"
    for k, v in straight_model.items():
        assert _same_tensor(v, model[k]), f"the resumed run's model differs from the uninterrupted run's at {k!r}"


RUN_CHECKS = [check_stash_survives_checkpoint, check_resume_equals_uninterrupted]
"""Checks every component gets whatever slots it fills (each runs tiny pipelines)."""

__all__ = ["RUN_CHECKS", "assert_same_value", "check_resume_equals_uninterrupted", "check_stash_survives_checkpoint"]
