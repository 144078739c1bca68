"""Engine cost against the number of *registered* clients: time per round, set-up time and memory per client.

Issue 13 asks that the engine's per-round cost not grow with the clients registered, only with the clients
sampled: 10⁵ registered with 50 sampled must take the same time per round as 10² registered (within 5%).
Issue 15 asks that 10⁵ registered clients run 3 rounds within 2 KiB of bookkeeping each, with set-up time
linear in clients. The job: synthetic 4x4 data, ``PER_CLIENT`` samples per client, IID partition, 50 clients
sampled per round (``uniform``), one SGD epoch of a 16->4 linear model, FedAvg, one torch thread. The two
population sizes run interleaved (small, large, large, small, ...; ``benchmarks/sidebyside.py``) so that load from
other jobs hits both alike; each run's median round forms one side of a pair, and the ratio is taken per pair.

    python benchmarks/engine_scale.py                      # rounds 6 x reps 3, set-up at 10^3..10^5, memory at 10^5
    python benchmarks/engine_scale.py --large 10000        # a quicker look
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from typing import Any

from sidebyside import Target, interleave
import torch
from torch import nn

import fedcore
from fedcore.builtin import IIDPartition, UniformSync
from fedcore.data.synthetic import synthetic_classification
from fedcore.engine.loop import Engine

PER_CLIENT = 8
SAMPLED = 50


def engine(clients: int, rounds: int) -> Engine:
    train = synthetic_classification(n=clients * PER_CLIENT, shape=(1, 4, 4), seed=0)
    test = synthetic_classification(n=64, shape=(1, 4, 4), seed=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    return Engine(fedcore.Pipeline([IIDPartition(), UniformSync(fraction=SAMPLED / clients)]), model=model,
                  train=train, test=test, num_clients=clients, rounds=rounds, seed=0)


def round_seconds(clients: int, rounds: int) -> tuple[list[float], list[float]]:
    """Wall and process-CPU seconds of each round after the first (the first pays lazy imports and warm-up).

    CPU time is what other jobs on a shared machine disturb least; wall time is the issue's measure.
    """
    e = engine(clients, rounds)
    marks: list[float] = []
    e.on_round = lambda row: marks.append(time.process_time())
    e.setup = _once(e.setup, lambda: marks.append(time.process_time()))  # CPU mark when the loop starts
    result = e.run()
    assert all(len(r["clients"]) == SAMPLED for r in result.history)
    cpu = [b - a for a, b in zip(marks[1:], marks[2:])]
    return [float(r["round_wall_s"]) for r in result.history.rows[1:]], cpu


def _once(setup: Any, after: Any) -> Any:
    def run() -> None:
        setup()
        after()
    return run


def setup_seconds(clients: int) -> float:
    e = engine(clients, 1)
    start = time.perf_counter()
    e.setup()
    return time.perf_counter() - start


def memory_per_client(clients: int, rounds: int = 3) -> tuple[float, float]:
    """Bytes of Python objects held after ``rounds`` rounds, and at the peak, per registered client."""
    e = engine(clients, rounds)
    gc.collect()
    tracemalloc.start()
    try:
        result = e.run()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.history) == rounds
    return held / clients, peak / clients


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    round_seconds(args.small, 2)  # warm-up: imports, allocator

    def contender(n: int):
        def run() -> dict[str, float]:
            wall, cpu = round_seconds(n, args.rounds)
            return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}
        return run

    small_name, large_name = f"{args.small:,} registered", f"{args.large:,} registered"
    runs = interleave({small_name: contender(args.small), large_name: contender(args.large)}, reps=args.reps)
    runs.print_header(f"engine time per round against registered clients, {SAMPLED} sampled per round",
                      rounds=f"{args.rounds} per run (median of rounds 2..)")
    runs.print_times("wall")
    runs.print_times("cpu")
    _, ratio = runs.print_ratio(large_name, small_name, key="wall", target=Target("<=", 1.05))
    _, cpu_ratio = runs.print_ratio(large_name, small_name, key="cpu")
    small = statistics.median(runs.values(small_name, "wall"))
    large = statistics.median(runs.values(large_name, "wall"))
    sizes = [n for n in (1_000, 10_000, 100_000) if n <= args.large]
    setup = {n: setup_seconds(n) for n in sizes}
    print("set-up: " + ", ".join(f"{n:,} clients {s:.2f} s ({s / n * 1e6:.1f} us/client)" for n, s in setup.items()))
    held, peak = memory_per_client(args.large)
    print(f"memory, {args.large:,} registered, 3 rounds: {held:.0f} B/client held, {peak:.0f} B/client peak "
          f"(target <= 2048)")
    return {"small_s": small, "large_s": large, "ratio": ratio, "cpu_ratio": cpu_ratio,
            "setup_s": setup, "held": held, "peak": peak}


if __name__ == "__main__":
    main()
