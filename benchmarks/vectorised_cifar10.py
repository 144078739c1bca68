"""pfl-research's CIFAR-10 setup, side by side and interleaved: fedcore one-by-one, vectorised (forced, auto), pfl.

    python benchmarks/vectorised_cifar10.py                       # CPU, 3 rounds per run (1 warm-up), 3 repetitions
    python benchmarks/vectorised_cifar10.py --device cuda         # GPU mode (fedcore sides on the GPU)
    python benchmarks/vectorised_cifar10.py --pfl-python /work/venvs/pfl/bin/python

The job: 1,000 users x 50 synthetic CIFAR-shaped images (32x32x3, 10 classes, fixed seed; real CIFAR-10 files are
not needed for timing), 50 users per round, one local epoch of SGD (lr 0.05) at batch 10, pfl's ``simple_cnn``
(``benchmarks/pfl_cifar10.py``), FedAvg, no evaluation. fedcore runs its inline engine three ways: the ``per-job``
cohort (one by one), ``vectorised`` forced on (``on_cpu="vectorise"``) and ``vectorised`` as configured by default
(``on_cpu="auto"``: on the CPU a timed probe of one step decides, once per machine; see ``docs/cohorts.md``). pfl
runs in its own environment (``benchmarks/requirements-pfl.txt``; ``--pfl-python`` names its interpreter). The
sides run in turn (A, B, C, D, A, B, ...) ``--reps`` times after one untimed warm-up each (``sidebyside.py``); each
run's figure is its mean steady round (the rounds after the first), and the ratios to one-by-one are per
repetition (min and median), with the load average and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pfl_cifar10 import simple_cnn  # noqa: E402  (the same model on every side)
from sidebyside import interleave, load_average, machine  # noqa: E402


def fedcore_rounds(cohort: object, args: argparse.Namespace) -> list[float]:
    import fedcore
    from fedcore.builtin import IIDPartition, SGDUpdate, UniformSync
    from fedcore.data import ArrayDataset

    rng = np.random.default_rng(0)
    n = args.users * args.per_user
    train = ArrayDataset(torch.from_numpy(rng.standard_normal((n, 3, 32, 32), dtype=np.float32)).to(args.device),
                         torch.from_numpy(rng.integers(0, 10, n)).to(args.device))
    torch.manual_seed(0)
    model = simple_cnn().to(args.device)
    stamps: list[float] = []
    pipe = fedcore.Pipeline([IIDPartition(), UniformSync(fraction=args.clients / args.users),
                             SGDUpdate(lr=0.05, batch_size=10, epochs=1), cohort])
    start = time.perf_counter()
    pipe.run(model=model, train=train, num_clients=args.users, rounds=args.rounds, seed=0,
             on_round=lambda row: stamps.append(time.perf_counter()))
    return np.diff([start, *stamps]).tolist()


def pfl_rounds(args: argparse.Namespace) -> list[float] | str:
    python = args.pfl_python or os.environ.get("FEDCORE_PFL_PYTHON")
    if not python:
        return "not run: give --pfl-python (a venv built from benchmarks/requirements-pfl.txt)"
    cmd = [python, str(HERE / "pfl_cifar10.py"), "--users", str(args.users), "--per-user", str(args.per_user),
           "--clients", str(args.clients), "--rounds", str(args.rounds), "--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])["round_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-user", type=int, default=50)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pfl-python", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from fedcore.builtin import PerJobCohort, VectorisedCohort

    def steady(rounds: list[float]) -> float:
        return statistics.mean(rounds[1:]) if len(rounds) > 1 else rounds[0]

    sides = {
        "fedcore one-by-one (per-job)": lambda: steady(fedcore_rounds(PerJobCohort(), args)),
        "fedcore vectorised (forced)": lambda: steady(fedcore_rounds(VectorisedCohort(on_cpu="vectorise"), args)),
        "fedcore vectorised (default, on_cpu=auto)": lambda: steady(fedcore_rounds(VectorisedCohort(), args)),
    }
    with_pfl = bool(args.pfl_python or os.environ.get("FEDCORE_PFL_PYTHON"))
    if with_pfl:
        def pfl() -> float:
            rounds = pfl_rounds(args)
            if isinstance(rounds, str):
                raise RuntimeError(f"pfl {rounds}")
            return steady(rounds)

        sides["pfl 0.6.0"] = pfl
    print(machine())
    print(f"pfl CIFAR-10 setup: {args.users} users x {args.per_user} images, {args.clients} clients/round, batch 10, "
          f"1 epoch, device {args.device}, {args.rounds} rounds per run (first = warm-up), {args.reps} repetitions "
          f"interleaved\nload average {load_average():.2f} (before)\n")
    times = interleave(sides, reps=args.reps, warmup=1).results
    base = times["fedcore one-by-one (per-job)"]
    print("| side | s / steady round (median) | clients/s | speed-up vs one-by-one, min / median |")
    print("|---|---|---|---|")
    for name, runs in times.items():
        r = [b / o for b, o in zip(base, runs)]
        print(f"| {name} | {statistics.median(runs):.2f} | {args.clients / statistics.median(runs):.1f} | "
              f"{min(r):.2f}x / {statistics.median(r):.2f}x |")
    if not with_pfl:
        print("| pfl 0.6.0 | not run: give --pfl-python (a venv built from benchmarks/requirements-pfl.txt) | | |")
    print(f"\nload average {load_average():.2f} (after)")


if __name__ == "__main__":
    main()
