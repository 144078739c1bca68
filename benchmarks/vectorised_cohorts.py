"""Frozen-backbone cohorts, side by side: clients/s of PromptFL and SA-FedLoRA (LoRA stage) one by one vs vectorised.

    python benchmarks/vectorised_cohorts.py                    # cohorts of 10 and 50 clients, CPU, 1 thread
    python benchmarks/vectorised_cohorts.py --clients 10 20 --rounds 3

PromptFL: the ``promptfl`` recipe on fedcore's tiny CLIP (``fedcore-tiny-clip``, random-initialised, frozen) and the
colour-shapes data, 2 shots of 2 random classes per client, 2 local epochs at batch 2; ``per-job`` against the
``vectorised-prompt`` cohort. SA-FedLoRA: the ``fedlora`` recipe (LoRA factors of rank 8 from round 0 on a frozen
micro ViT of width 32, depth 2, plus the head) on the digits, 20 samples per client, 1 local epoch at batch 10;
``per-job`` against ``vectorised`` (forced: the patch embedding is a convolution). Every client trains every round;
the first round is a warm-up, the table gives the mean of the others.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

import fedcore


def timed(pipe: Any, **run: Any) -> float:
    stamps: list[float] = []
    start = time.perf_counter()
    pipe.run(on_round=lambda row: stamps.append(time.perf_counter()), **run)
    rounds = [b - a for a, b in zip([start, *stamps], stamps)]
    return statistics.mean(rounds[1:])


def promptfl(clients: int, cohort: Any, rounds: int) -> float:
    from fedcore_clip import prompted_clip
    from fedcore_clip.testing import shapes_data, tiny_backbone

    train, test = shapes_data(2 * clients, 1, 6, stream="bench")
    pipe = fedcore.recipe("promptfl", cohort=cohort, partition={"shots": 2, "mode": "random_classes"},
                          local_update={"lr": 0.05, "epochs": 2, "batch_size": 2})
    model = prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=0)
    return timed(pipe, model=model, train=train, test=test, num_clients=clients, rounds=rounds, seed=0,
                 eval_every=10 ** 6)


def fedlora(clients: int, cohort: Any, rounds: int) -> float:
    from fedcore.data import load_digits
    from fedcore.models import micro_vit

    train, _ = load_digits()
    torch.manual_seed(0)
    model = micro_vit(num_classes=10, embed_dim=32, depth=2, num_heads=2)
    pipe = fedcore.recipe("fedlora", cohort=cohort, partition={"name": "iid"},
                          local_update={"e2_local_epochs": 1, "batch_size": 10})
    sub = train.subset(range(20 * clients))
    return timed(pipe, model=model, train=sub, test=None, num_clients=clients, rounds=rounds, seed=0,
                 eval_every=10 ** 6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases = [("PromptFL", promptfl, "vectorised-prompt"),
             ("SA-FedLoRA (LoRA stage)", fedlora, {"name": "vectorised", "on_cpu": "vectorise"})]
    print(f"CPU, {args.threads} thread(s), {args.rounds} rounds (first = warm-up)\n")
    print("| method | cohort | one-by-one clients/s | vectorised clients/s | ratio |")
    print("|---|---|---|---|---|")
    for name, fn, vectorised in cases:
        for n in args.clients:
            one = fn(n, "per-job", args.rounds)
            vec = fn(n, vectorised, args.rounds)
            print(f"| {name} | {n} | {n / one:.1f} | {n / vec:.1f} | {one / vec:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
