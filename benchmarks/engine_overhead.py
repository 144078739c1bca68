"""Engine overhead: fedcore's wall time per FedAvg round against a hand-written torch loop doing the same work.

Same data (the embedded 8x8 digits), same partition (IID, 10 clients, computed once and handed to both),
same model and initial weights (fedcore.models.micro_cnn), same optimizer (SGD, lr 0.05, momentum 0.9, a
fresh optimizer per client per round), same batch order (each client's shuffle comes from the stream
``(seed, round, client, "shuffle")``, the stream fedcore's SGDUpdate uses), 1 local epoch, batch 32,
sample-weighted averaging. Evaluation on the test set runs once, after the last round, in both.

Runners run interleaved (A B, B A, ...; ``benchmarks/sidebyside.py``) so that load on a shared machine hits both
alike; each run gives its median wall and CPU seconds per round, and the report gives the minimum and median of the
per-pair ratios to the torch loop (target: at most 1.05x wall, benchmarks/README.md), plus the same for this
process's CPU time, which other processes on a shared machine disturb much less than wall time. A runner is any callable
``runner(setup) -> {"round_s": [wall s per round], "cpu_s": [process CPU s per round], "accuracy": float,
"state": state_dict}`` (``cpu_s`` optional); add peers
(Flower, ...) to ``RUNNERS`` or with ``--peer module:function``.

    python benchmarks/engine_overhead.py                 # 5 rounds x 5 pairs
    python benchmarks/engine_overhead.py --profile       # cProfile of one fedcore run, top 25 by own time
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
import importlib
import statistics
import sys
import time
from typing import Any

import attrs
import numpy as np
from sidebyside import Target, interleave
import torch
from torch import nn

import fedcore
from fedcore.builtin import FedAvg, GivenPartition, SGDUpdate, UniformSync
from fedcore.data import load_digits
from fedcore.models import micro_cnn
from fedcore.rng import torch_generator


@attrs.frozen(kw_only=True)
class Setup:
    """Everything both sides share."""

    train: Any
    test: Any
    parts: tuple[tuple[int, ...], ...]
    init: dict[str, torch.Tensor]
    rounds: int
    seed: int = 0
    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 32
    width: int = 32

    def model(self) -> nn.Module:
        m = micro_cnn(num_classes=10, width=self.width)
        m.load_state_dict(self.init)
        return m


def make_setup(rounds: int, num_clients: int = 10, seed: int = 0) -> Setup:
    train, test = load_digits(seed=seed)
    perm = np.random.default_rng(seed).permutation(len(train))
    parts = tuple(tuple(sorted(p.tolist())) for p in np.array_split(perm, num_clients))
    torch.manual_seed(seed)
    init = {k: v.clone() for k, v in micro_cnn(num_classes=10).state_dict().items()}
    return Setup(train=train, test=test, parts=parts, init=init, rounds=rounds, seed=seed)


def accuracy(model: nn.Module, test: Any) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(test.x).argmax(-1) == test.y).float().mean())


# -- the hand-written torch loop ---------------------------------------------------------------

def run_torch(s: Setup) -> dict[str, Any]:
    """FedAvg in plain torch: one global model, one reused client model, state dicts averaged in float64."""
    global_model = s.model()
    client = s.model()
    round_s, cpu_s = [], []
    for r in range(s.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        global_state = global_model.state_dict()
        states, weights = [], []
        for c, idx in enumerate(s.parts):
            client.load_state_dict(global_state)
            client.train()
            opt = torch.optim.SGD(client.parameters(), lr=s.lr, momentum=s.momentum)
            order = torch.as_tensor(idx)[torch.randperm(len(idx), generator=torch_generator(
                s.seed, "round", r, "client", c, "shuffle"))]
            for start in range(0, len(order), s.batch_size):
                b = order[start:start + s.batch_size]
                loss = nn.functional.cross_entropy(client(s.train.x[b]), s.train.y[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            states.append({k: v.detach().clone() for k, v in client.state_dict().items()})
            weights.append(float(len(idx)))
        total = sum(weights)
        new = {}
        for k, v in global_state.items():
            if v.is_floating_point():
                acc = torch.zeros_like(v, dtype=torch.float64)
                for st, w in zip(states, weights):
                    acc.add_(st[k].to(torch.float64), alpha=w / total)
                new[k] = acc.to(v.dtype)
            else:  # BatchNorm's integer counter is not sent back (as in fedcore's whole-model share): keep it
                new[k] = v
        global_model.load_state_dict(new)
        acc_value = accuracy(global_model, s.test) if r == s.rounds - 1 else None
        round_s.append(time.perf_counter() - t0)
        cpu_s.append(time.process_time() - c0)
    return {"round_s": round_s, "cpu_s": cpu_s, "accuracy": acc_value, "state": global_model.state_dict()}


# -- fedcore -----------------------------------------------------------------------------------

def run_fedcore(s: Setup) -> dict[str, Any]:
    pipe = fedcore.Pipeline([GivenPartition(parts=s.parts), UniformSync(fraction=1.0),
                             SGDUpdate(lr=s.lr, momentum=s.momentum, batch_size=s.batch_size, epochs=1), FedAvg()])
    model = s.model()
    marks = [(time.perf_counter(), time.process_time())]  # round r spans marks[r] .. marks[r + 1] (round 0: + set-up)
    result = pipe.run(model=model, train=s.train, test=s.test, num_clients=len(s.parts), rounds=s.rounds,
                      seed=s.seed, eval_every=s.rounds,
                      on_round=lambda row: marks.append((time.perf_counter(), time.process_time())))
    return {"round_s": [b[0] - a[0] for a, b in zip(marks, marks[1:])],
            "cpu_s": [b[1] - a[1] for a, b in zip(marks, marks[1:])],
            "accuracy": result.history.last("test_accuracy"), "state": result.model.state_dict()}


RUNNERS: dict[str, Callable[[Setup], dict[str, Any]]] = {"torch": run_torch, "fedcore": run_fedcore}
"""Runner name -> callable. ``torch`` is the reference every ratio is taken against."""

TARGET = Target("<=", 1.05)
"""fedcore's wall time per round against the hand-written loop (benchmarks/README.md, "Engine overhead")."""


def contender(runner: Callable[[Setup], dict[str, Any]], setup: Setup, last: dict[str, Any]) -> Callable[[], dict]:
    """One run of ``runner``: its median wall and CPU seconds per round (its final weights and accuracy kept)."""
    def run() -> dict[str, float]:
        res = runner(setup)
        last.update(state=res["state"], accuracy=res["accuracy"])
        return {"wall": statistics.median(res["round_s"]),
                "cpu": statistics.median(res["cpu_s"]) if res.get("cpu_s") else float("nan")}
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peer", action="append", default=[], help="extra runner, module:function (name = function)")
    ap.add_argument("--profile", action="store_true", help="cProfile one fedcore run instead of benchmarking")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    setup = make_setup(args.rounds)
    runners = dict(RUNNERS)
    for spec in args.peer:
        mod, fn = spec.split(":")
        runners[fn] = getattr(importlib.import_module(mod), fn)
    if args.profile:
        import cProfile
        import pstats

        run_fedcore(setup)  # warm up
        prof = cProfile.Profile()
        prof.runcall(run_fedcore, setup)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return 0
    last: dict[str, dict[str, Any]] = {name: {} for name in runners}
    runs = interleave({name: contender(fn, setup, last[name]) for name, fn in runners.items()}, reps=args.reps,
                      warmup=1)  # the warm-up pair pays first-call allocations and lazy imports
    runs.print_header(f"FedAvg, 10 clients, 1 local epoch, digits ({len(setup.train)} train), micro CNN, batch "
                      f"{setup.batch_size}: fedcore's engine against a hand-written torch loop",
                      rounds=f"{args.rounds} per run (median per run)", torch_threads=args.threads)
    runs.print_times("wall")
    runs.print_times("cpu")
    for name in runners:
        if name != "torch":
            runs.print_ratio(name, "torch", key="wall", target=TARGET if name == "fedcore" else None)
            runs.print_ratio(name, "torch", key="cpu")
    same = all(torch.equal(last["torch"]["state"][k], last["fedcore"]["state"][k]) for k in last["torch"]["state"])
    print("  final accuracy: " + ", ".join(f"{n} {last[n]['accuracy']:.4f}" for n in runners)
          + f"; fedcore and torch final weights identical: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
