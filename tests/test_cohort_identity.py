"""Bit-identity of the engine refactor (cohort slot, straight update path) against recorded runs.

``tests/data/golden_runs.json`` was recorded from the engine *before* the cohort slot existed (commit
f44d339, the per-job path: executor -> select_data -> local_update per client). Every run here must give
exactly the same history rows (wall-clock columns and the per-round client-metric columns added since aside, see
``client_metric_columns``; their ``train_loss`` must still match), ledger rows and final weights (sha256 of every
tensor's bytes), with one torch intra-op thread. Regenerate only on purpose, from the old engine:
``git archive f44d339 | tar -x -C OLD; PYTHONPATH=OLD python tests/test_cohort_identity.py --record``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
import sys

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import (
    AsyncSchedule,
    BufferedSchedule,
    DirichletPartition,
    FedAsyncMix,
    FedAvg,
    FedBuffStep,
    SemiAsyncSchedule,
    SGDUpdate,
    UniformSync,
)
from fedcore.runtime import DeviceProfile, Faults, SimClock
from fedcore.testing import ContractFixture, run_tiny_pipeline, tiny_data
from fedcore.types import AggregateResult

GOLDEN = Path(__file__).parent / "data" / "golden_runs.json"
WALL = ("wall_s", "round_wall_s")

FAST = DeviceProfile(name="fast", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=2**30, jitter=0.2)
TABLE = {"fast": FAST, "slow": FAST.scaled(speed=0.1, bandwidth=0.1, name="slow")}
PROFILES = ["fast"] * 4 + ["slow"] * 2
SIX = ContractFixture(num_clients=6)


def bn_model() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                             nn.Linear(16, 4))


@attrs.frozen(eq=False, kw_only=True)
class PersonalBias:
    """FedAvg, plus a personalised download of the head's bias for client 0 (exercises ``client_views``)."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        avg = FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        return AggregateResult(state=avg.state, per_client={0: {"3.bias": avg.state["3.bias"] * 0.5 + 1.0}})


def small_vit() -> nn.Module:
    from fedcore.models import micro_vit

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)


def _split():
    from fedcore.split import SplitFedV1  # a split share: per-batch endpoint traffic on each client's channel

    return SplitFedV1()


def _clocked(**kw):
    return dict(fixture=SIX, clock=SimClock(TABLE), profiles=PROFILES, **kw)


RUNS = {
    "sync-default": lambda: run_tiny_pipeline([], rounds=3),
    "sync-bn-prox-sampled": lambda: run_tiny_pipeline(
        [DirichletPartition(alpha=0.5), UniformSync(fraction=0.5), SGDUpdate(lr=0.1, mu=0.01, momentum=0.5)],
        rounds=4, fixture=ContractFixture(model_factory=bn_model, num_clients=4)),
    "sync-deadline-clock": lambda: run_tiny_pipeline([UniformSync(deadline=0.5)], rounds=3, **_clocked()),
    "fedasync": lambda: run_tiny_pipeline([AsyncSchedule(concurrency=3), FedAsyncMix()], rounds=6, **_clocked()),
    "fedbuff": lambda: run_tiny_pipeline([BufferedSchedule(buffer_size=2, concurrency=4), FedBuffStep()], rounds=5,
                                         **_clocked()),
    "semi-async-faults": lambda: run_tiny_pipeline(
        [SemiAsyncSchedule(mu=0.5, t_clk=0.01)], rounds=5,
        faults=Faults(dropout_before=0.15, dropout_during=0.2, lost_upload=0.15), **_clocked()),
    "personal-views": lambda: run_tiny_pipeline([PersonalBias()], rounds=3),
    "splitfed-v1": lambda: run_tiny_pipeline([_split()], rounds=2, fixture=ContractFixture(
        model_factory=small_vit, data_factory=lambda: tiny_data(n=48, n_test=24))),
}


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def run_pinned(make) -> dict:
    """One run with one intra-op thread (float reductions depend on the thread count; other tests change it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fingerprint(make())
    finally:
        torch.set_num_threads(threads)


def client_metric_columns(row: dict) -> set[str]:
    """The ``client_<m>``/``_min``/``_max`` columns (per-round client metrics, added after the recording): told
    apart from other ``client_*`` keys (``client_utilisation``) by their ``_min`` partner."""
    names = {k[len("client_"):-len("_min")] for k in row if k.startswith("client_") and k.endswith("_min")}
    return {f"client_{m}{suffix}" for m in names for suffix in ("", "_min", "_max")}


def fingerprint(result) -> dict:
    rows = [{k: v for k, v in r.items() if k not in WALL and k not in client_metric_columns(r)}
            for r in result.history]
    weights = {k: _digest(v) for k, v in result.model.state_dict().items()}
    return json.loads(json.dumps({"history": rows, "ledger": result.ledger.to_rows(), "weights": weights}))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runs_are_bit_identical_to_the_recorded_per_job_engine(name):
    golden = json.loads(GOLDEN.read_text())[name]
    got = run_pinned(RUNS[name])
    assert got["history"] == golden["history"]
    assert got["ledger"] == golden["ledger"]
    assert got["weights"] == golden["weights"]


if __name__ == "__main__" and "--record" in sys.argv:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({name: run_pinned(make) for name, make in sorted(RUNS.items())}, indent=1))
    print(f"recorded {len(RUNS)} runs into {GOLDEN}")
