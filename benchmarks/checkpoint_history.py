"""Checkpoint cost against the number of rounds: history and ledger as journals (now) vs embedded in state.json.

A real run of ROUNDS rounds (a tiny model, 2 clients, FedAvg; evaluation every 1000 rounds) checkpoints every EVERY
rounds; each checkpoint's state.json size and the time ``Checkpointer.after_round`` took are recorded, and each
run's wall and process CPU time. The *embedded* contender is the same Checkpointer with no journals (what fedcore did
before issue 29: the whole history and ledger inside every state.json). The two runs are interleaved (journal,
embedded, embedded, journal); every checkpoint's size and median write time are printed, then the first and the
last: flat is journal's last/first ratio near 1. A run's CPU time grows linearly in the rounds when nothing per
round scans the whole run (the history rows' byte totals are running sums of the ledger).

    python benchmarks/checkpoint_history.py [ROUNDS] [EVERY]     # default 10000 1000
"""
from __future__ import annotations

import os
from pathlib import Path
import statistics
import sys
import tempfile
import time

import torch

from fedcore.builtin import FedAvg, SGDUpdate, UniformSync
from fedcore.engine.checkpoint import STATE, Checkpointer, list_checkpoints
from fedcore.testing import ContractFixture, run_tiny_pipeline


class EmbeddedCheckpointer(Checkpointer):
    """The pre-journal layout: history and ledger inside every state.json."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.journals = {}


Seen = tuple[int, int, float, float]  # round, state.json bytes, wall and CPU seconds in after_round


def run(kind: str, rounds: int, every: int) -> tuple[list[Seen], float, float]:
    """``(round, state.json bytes, wall s, CPU s in after_round)`` per checkpoint, and the run's wall and CPU s."""
    seen: list[Seen] = []
    wall, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as root:
        cls = Checkpointer if kind == "journal" else EmbeddedCheckpointer
        checkpointer = cls(Path(root), every=every, keep=1)
        inner = checkpointer.after_round

        def timed(run_ctx, **kwargs):
            start, start_cpu = time.perf_counter(), time.process_time()
            path = inner(run_ctx, **kwargs)
            took, took_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            if path is not None:
                seen.append((run_ctx.server.version, (path / STATE).stat().st_size, took, took_cpu))
                print(f"  {kind:9s} round {seen[-1][0]:>6}: {seen[-1][1] / 1024:8.1f} KiB, {took * 1e3:7.1f} ms "
                      f"({took_cpu * 1e3:6.1f} ms CPU); "
                      f"{time.perf_counter() - wall:7.1f} s wall, {time.process_time() - cpu:7.1f} s CPU so far; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
            return path

        checkpointer.after_round = timed
        run_tiny_pipeline([SGDUpdate(lr=0.05, epochs=1), UniformSync(fraction=1.0), FedAvg()], rounds=rounds,
                          fixture=ContractFixture(num_clients=2), checkpoint=checkpointer, eval_every=1000)
        assert len(list_checkpoints(root)) == 1
    return seen, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    every = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    torch.set_num_threads(1)
    print(f"checkpoint cost vs rounds: {rounds} rounds, a checkpoint every {every}; load {os.getloadavg()[0]:.2f}")
    results: dict[str, list[list[Seen]]] = {"journal": [], "embedded": []}
    for order in (("journal", "embedded"), ("embedded", "journal")):
        for kind in order:
            seen, wall, cpu = run(kind, rounds, every)
            results[kind].append(seen)
            print(f"{kind:9s} run: {wall:8.1f} s wall, {cpu:8.1f} s CPU; load {os.getloadavg()[0]:.2f}", flush=True)
    print("round   | journal KiB, ms wall, ms CPU (medians) | embedded KiB, ms wall, ms CPU (medians)")
    for i, (rnd, *_) in enumerate(results["journal"][0]):
        cells = [f"{results[kind][0][i][1] / 1024:8.1f} {statistics.median(r[i][2] for r in results[kind]) * 1e3:7.1f} "
                 f"{statistics.median(r[i][3] for r in results[kind]) * 1e3:7.1f}" for kind in results]
        print(f"{rnd:>7} | {cells[0]:>38} | {cells[1]:>38}")
    for kind, runs in results.items():
        first, last = runs[0][0], runs[0][-1]
        t_first, t_last = (statistics.median(r[i][2] for r in runs) for i in (0, -1))
        c_first, c_last = (statistics.median(r[i][3] for r in runs) for i in (0, -1))
        print(f"{kind:9s} round {first[0]:>6}: state.json {first[1] / 1024:8.1f} KiB, {t_first * 1e3:7.1f} ms | "
              f"round {last[0]:>6}: {last[1] / 1024:8.1f} KiB, {t_last * 1e3:7.1f} ms | "
              f"last/first size {last[1] / first[1]:.2f}, time {t_last / t_first:.2f}, CPU {c_last / c_first:.2f}")


if __name__ == "__main__":
    main()
