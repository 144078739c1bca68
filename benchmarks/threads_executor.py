"""The threads executor against inline on the digits job: time per steady round and per run, interleaved.

    python benchmarks/threads_executor.py                       # 4 pairs of 10-round runs, 2 workers
    python benchmarks/threads_executor.py --reps 6 --workers 2 --config examples/fedavg_dirichlet.toml

Both sides run ``examples/fedavg_dirichlet.toml`` as ``fedcore run`` builds it (10 clients, Dirichlet(0.5), the micro
CNN, one local epoch of SGD at batch 32, FedAvg, a test-set evaluation every round, 1 torch thread on the calling
thread), in this process, through ``Pipeline.run``: ``inline`` trains the clients of a round one after another,
``threads`` in ``--workers`` threads of one intra-op thread each. A steady round is the median of rounds 2..R of one
run (round 1 pays first-call costs); each pair is one run of each, interleaved, and the ratio inline / threads is taken
within the pair. The histories must be identical (checked on every run). Target (benchmarks/README.md): threads at
least 1.7x inline per steady round with 2 workers on 2 cores. On a shared machine the kernel gives each session
(autogroup) its share of the cores, however many threads it runs, so a parallel speed-up only shows when the other
sessions leave the cores free: each pair also times a fixed load of matrix products in one thread and in two, whose
ratio says how many cores the process really had.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import statistics
import sys
import time
from typing import Any

from sidebyside import Target, interleave
import torch

from fedcore.experiment.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
TARGET = Target(">=", 1.7)


def run_once(config: Path, executor: str, reference: list[Any]) -> dict[str, float]:
    """One whole run; its history must equal the first run's (whatever the executor)."""
    materials = prepare(config, [f"executor={executor}"])
    start, cpu = time.perf_counter(), time.process_time()
    result = materials.plan.pipeline.run(model=materials.model, train=materials.train, test=materials.test,
                                         executor=materials.executor, **materials.run_kwargs)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows = result.history.comparable()
    if not reference:
        reference.append(rows)
    elif rows != reference[0]:
        raise AssertionError(f"executor {executor}: the history differs from the first run's")
    rounds = [r["round_wall_s"] for r in result.history]
    return {"steady": statistics.median(rounds[1:]), "first": rounds[0], "run": wall, "cpu": cpu}


def cores_probe(threads: int, work: int = 1200) -> float:
    """Seconds for ``work`` 256x256 matrix products split over ``threads`` Python threads (torch releases the GIL in
    them): one thread over two threads is how many cores this process really had at that moment (2.0: both free)."""
    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))

    def part(n: int) -> None:
        torch.set_num_threads(1)  # one core per probe thread (a new thread would take the process default)
        for _ in range(n):
            torch.mm(a, a)

    own = torch.get_num_threads()
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(part, [work // threads] * threads))
    took = time.perf_counter() - start
    torch.set_num_threads(own)  # set_num_threads in a thread also sets the process default: give it back
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "fedavg_dirichlet.toml")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args(argv)
    reference: list[Any] = []
    threads = f'{{name="threads",workers={args.workers}}}'
    runs = interleave({"inline": lambda: run_once(args.config, '"inline"', reference),
                       "threads": lambda: run_once(args.config, threads, reference),
                       "cores probe, 1 thread": lambda: cores_probe(1),
                       "cores probe, 2 threads": lambda: cores_probe(2)},
                      reps=args.reps, warmup=args.warmup)
    runs.print_header(f"threads executor ({args.workers} workers) vs inline: {args.config.name}, whole runs in this "
                      f"process", warmup=f"{args.warmup} pair(s) untimed")
    for key in ("steady", "first", "run", "cpu"):
        runs.print_times(key, names=["inline", "threads"])
    runs.print_times(names=["cores probe, 1 thread", "cores probe, 2 threads"])
    runs.print_ratio("inline", "threads", key="steady", target=TARGET, label="inline / threads per steady round")
    runs.print_ratio("inline", "threads", key="run", label="inline / threads per 10-round run (in process)")
    runs.print_ratio("threads", "inline", key="cpu", label="CPU time threads / inline")
    runs.print_ratio("cores probe, 1 thread", "cores probe, 2 threads",
                     label="cores this process had (matrix products, 1 thread / 2 threads; 2.0 = both cores free)")
    print("  histories identical on every run: True")
    return 0


if __name__ == "__main__":
    sys.exit(main())
