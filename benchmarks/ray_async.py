"""Parallel async on Ray: asynchronous policies with every job in flight training at once, side by side.

    python benchmarks/ray_async.py [--clients 12 --rounds 16 --concurrency 4 --epochs 2 --workers 2]
    python benchmarks/ray_async.py --write benchmarks/README.md   # also writes its table there, between markers

One FedAsync job (``AsyncSchedule(concurrency=4)``: the server mixes in each update as it arrives and starts a
replacement at once) and one FedBuff job (``BufferedSchedule(buffer_size=2, concurrency=4)``) on the embedded
digits with a micro ViT and a clock that prices each job before it runs (seeded virtual seconds per client and
round; ``Clock.duration_at_dispatch``), so the arrival order is known at dispatch. Run three ways in one process:

* inline, one torch thread;
* Ray, 2 actors, **one job per arrival**: the executor is wrapped so that it only has ``run()``, the way the
  engine drove Ray before jobs were submitted (each replacement trains alone while the other actor idles);
* Ray, 2 actors, **parallel**: ``RayExecutor.submit``; the engine collects a job's result only at its arrival.

Rounds after the first two are timed (the first rounds pay for imports in fresh workers). The three run
interleaved, ``--reps`` times (``benchmarks/sidebyside.py``), on one local Ray cluster; the ratio one-job-per-arrival
over parallel is taken within each pair, and the table gives its minimum and median. The check: both Ray runs give
the inline history.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import re
import statistics
import time

from sidebyside import interleave, load_average, machine
import torch

from fedcore.builtin import AsyncSchedule, BufferedSchedule, IIDPartition, SGDUpdate
from fedcore.data import load_digits
from fedcore.engine.ray_executor import RayExecutor
from fedcore.models import micro_vit
from fedcore.pipeline import Pipeline
from fedcore.rng import numpy_generator
from fedcore.runtime import ClockBase


class DeviceTimes(ClockBase):
    """Each job takes a seeded virtual time known before it runs (0.5-2 s: a mix of fast and slow devices)."""

    def duration_at_dispatch(self, client, *, share, round):
        return float(numpy_generator(0, "device-time", round, client.id).uniform(0.5, 2.0))


class OneJobPerArrival:
    """The Ray executor without ``submit``: the engine waits for every dispatch wave before it goes on."""

    def __init__(self, inner: RayExecutor) -> None:
        self.inner = inner

    def start(self, pipeline, dataset):
        self.inner.start(pipeline, dataset)

    def run(self, jobs):
        return self.inner.run(jobs)

    def close(self):
        self.inner.close()


def job(schedule, executor, args, data):
    train, test = data
    torch.manual_seed(0)
    stamps: list[float] = []
    pipe = Pipeline([IIDPartition(), schedule, SGDUpdate(lr=0.05, epochs=args.epochs, batch_size=16)])
    result = pipe.run(model=micro_vit(num_classes=10, depth=2), train=train, test=test, num_clients=args.clients,
                      rounds=args.rounds, seed=0, executor=executor, eval_every=args.rounds, clock=DeviceTimes(),
                      on_round=lambda row: stamps.append(time.perf_counter()))
    warm = stamps[-1] - stamps[1]  # rounds 3..N
    return result, warm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--write", default=None, help="a markdown file whose ray_async markers get the table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_digits(seed=0)
    schedules = {"FedAsync": lambda: AsyncSchedule(concurrency=args.concurrency),
                 "FedBuff": lambda: BufferedSchedule(buffer_size=2, concurrency=args.concurrency)}
    import ray

    from fedcore.engine.ray_cluster import start_local_cluster

    start_local_cluster(num_cpus=args.workers)  # one cluster for every run (actors start per run)
    loads = [load_average()]
    lines = [f"{args.clients} clients, {args.rounds} rounds, concurrency {args.concurrency}, "
             f"{args.epochs} local epochs, micro ViT (depth 2) on digits, {args.workers} Ray workers x 1 thread; "
             f"rounds 3..{args.rounds} timed; {args.reps} pairs interleaved, ratios per pair; {machine()}, "
             f"Ray {ray.__version__}, LOADS", "",
             "| policy | inline (s, median) | Ray, one job per arrival (s) | Ray, parallel (s) "
             "| parallel vs one job per arrival (min / median) | histories vs inline |",
             "|---|---:|---:|---:|---:|---|"]
    for name, make in schedules.items():
        results: dict[str, object] = {}

        def contender(label: str, executor_of, make=make, results=results):  # this policy's, bound here
            def go() -> float:
                results[label], seconds = job(make(), executor_of(), args, data)
                return seconds
            return go

        runs = interleave({"inline": contender("inline", lambda: None),
                           "serial": contender("serial",
                                               lambda: OneJobPerArrival(RayExecutor(num_workers=args.workers))),
                           "parallel": contender("parallel", lambda: RayExecutor(num_workers=args.workers))},
                          reps=args.reps)
        loads += runs.loads
        inline, serial, parallel = results["inline"], results["serial"], results["parallel"]
        same = (inline.history.comparable() == serial.history.comparable() == parallel.history.comparable()
                and all(torch.equal(v, parallel.model.state_dict()[k]) for k, v in inline.model.state_dict().items()))
        ratios = runs.ratios("serial", "parallel")
        med = {k: statistics.median(runs.values(k)) for k in runs.names}
        lines.append(f"| {name} | {med['inline']:.2f} | {med['serial']:.2f} | {med['parallel']:.2f} "
                     f"| {min(ratios):.2f}x / **{statistics.median(ratios):.2f}x** "
                     f"| {'identical' if same else 'DIFFERENT'} |")
    ray.shutdown()
    loads.append(load_average())
    lines[0] = lines[0].replace("LOADS", f"load average {loads[0]:.1f} at the start, {max(loads):.1f} at most, "
                                         f"{loads[-1]:.1f} at the end")
    print("\n".join(lines))
    if args.write:
        path = Path(args.write)
        text = path.read_text()
        block = "<!-- ray_async:start -->\n" + "\n".join(lines) + "\n<!-- ray_async:end -->"
        pattern = re.compile(r"<!-- ray_async:start -->.*?<!-- ray_async:end -->", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{path} has no <!-- ray_async:start --> ... <!-- ray_async:end --> markers")
        path.write_text(pattern.sub(lambda _: block, text))


if __name__ == "__main__":
    main()
