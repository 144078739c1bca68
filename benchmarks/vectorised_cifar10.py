"""pfl-research's CIFAR-10 setup, side by side: fedcore one-by-one, fedcore vectorised, pfl (and Flower if asked).

    python benchmarks/vectorised_cifar10.py                       # CPU, 3 rounds (1 warm-up + 2 steady)
    python benchmarks/vectorised_cifar10.py --device cuda         # GPU mode (fedcore sides on the GPU)
    python benchmarks/vectorised_cifar10.py --pfl-python /work/venvs/pfl/bin/python

The job: 1,000 users x 50 synthetic CIFAR-shaped images (32x32x3, 10 classes, fixed seed; real CIFAR-10 files are
not needed for timing), 50 users per round, one local epoch of SGD (lr 0.05) at batch 10, pfl's ``simple_cnn``
(``benchmarks/pfl_cifar10.py``), FedAvg, no evaluation. fedcore runs its inline engine three ways: the ``per-job``
cohort (one by one), ``vectorised`` forced on (``on_cpu="vectorise"``) and ``vectorised`` as configured by default
(``on_cpu="auto"``: on the CPU this convolutional model runs one by one, see ``CPU_CONV_FLOPS``). pfl runs in its
own environment (``benchmarks/requirements-pfl.txt``; ``--pfl-python`` names its interpreter). Steady rounds are
the rounds after the first; the table gives clients/s and seconds per steady round, and ratios to one-by-one.
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pfl-python", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from fedcore.builtin import PerJobCohort, VectorisedCohort

    sides: dict[str, list[float] | str] = {
        "fedcore one-by-one (per-job)": fedcore_rounds(PerJobCohort(), args),
        "fedcore vectorised (forced)": fedcore_rounds(VectorisedCohort(on_cpu="vectorise"), args),
        "fedcore vectorised (default, on_cpu=auto)": fedcore_rounds(VectorisedCohort(), args),
        "pfl 0.6.0": pfl_rounds(args),
    }
    base = statistics.mean(sides["fedcore one-by-one (per-job)"][1:])  # type: ignore[arg-type]
    print(f"pfl CIFAR-10 setup: {args.users} users x {args.per_user} images, {args.clients} clients/round, batch 10, "
          f"1 epoch, device {args.device}, {args.threads} thread(s), {args.rounds} rounds (first = warm-up)\n")
    print("| side | s / steady round | clients/s | vs one-by-one |")
    print("|---|---|---|---|")
    for name, rounds in sides.items():
        if isinstance(rounds, str):
            print(f"| {name} | {rounds} | | |")
            continue
        steady = statistics.mean(rounds[1:]) if len(rounds) > 1 else rounds[0]
        print(f"| {name} | {steady:.2f} | {args.clients / steady:.1f} | {base / steady:.2f}x |")


if __name__ == "__main__":
    main()
