"""Engine overhead: fedcore's wall time per FedAvg round against a hand-written torch loop doing the same work.

Same data (the embedded 8x8 digits), same partition (IID, 10 clients, computed once and handed to both),
same model and initial weights (fedcore.models.micro_cnn), same optimizer (SGD, lr 0.05, momentum 0.9, a
fresh optimizer per client per round), same batch order (each client's shuffle comes from the stream
``(seed, round, client, "shuffle")``, the stream fedcore's SGDUpdate uses), 1 local epoch, batch 32,
sample-weighted averaging. Evaluation on the test set runs once, after the last round, in both.

Runners run interleaved (A B B A A B ...) so that load on a shared machine hits both alike; the report gives
median wall seconds per round and the ratio to the torch loop (the target), plus the same for this process's CPU
time, which other processes on a shared machine disturb much less than wall time. A runner is any callable
``runner(setup) -> {"round_s": [wall s per round], "cpu_s": [process CPU s per round], "accuracy": float,
"state": state_dict}`` (``cpu_s`` optional); add peers
(Flower, ...) to ``RUNNERS`` or with ``--peer module:function``.

    python benchmarks/engine_overhead.py                 # 5 rounds x 5 repetitions
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


def measure(runners: dict[str, Callable], setup: Setup, reps: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {name: {"round_s": [], "cpu_s": [], "accuracy": []} for name in runners}
    for rep in range(reps):
        order = list(runners) if rep % 2 == 0 else list(runners)[::-1]  # alternate who goes first
        for name in order:
            res = runners[name](setup)
            out[name]["round_s"].extend(res["round_s"])
            out[name]["cpu_s"].extend(res.get("cpu_s", []))
            out[name]["accuracy"].append(res["accuracy"])
            out[name]["state"] = res["state"]
    return out


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
    run_torch(setup), run_fedcore(setup)  # warm-up (first-call allocations, lazy imports)
    res = measure(runners, setup, args.reps)
    ref = statistics.median(res["torch"]["round_s"])
    ref_cpu = statistics.median(res["torch"]["cpu_s"])
    print(f"FedAvg, 10 clients, 1 local epoch, digits ({len(setup.train)} train), micro CNN, batch {setup.batch_size}, "
          f"{args.rounds} rounds x {args.reps} interleaved repetitions, torch threads {args.threads}")
    print(f"{'runner':<10} {'wall s/round':>13} {'ratio':>8} {'CPU s/round':>12} {'ratio':>8} {'final accuracy':>15}")
    for name, r in res.items():
        med = statistics.median(r["round_s"])
        cpu = statistics.median(r["cpu_s"]) if r["cpu_s"] else float("nan")
        print(f"{name:<10} {med:>13.4f} {med / ref:>7.3f}x {cpu:>12.4f} {cpu / ref_cpu:>7.3f}x "
              f"{statistics.median(r['accuracy']):>15.4f}")
    same = all(torch.equal(res["torch"]["state"][k], res["fedcore"]["state"][k]) for k in res["torch"]["state"])
    print(f"fedcore and torch final weights identical: {same}")
    ratio = statistics.median(res["fedcore"]["round_s"]) / ref
    cpu_ratio = statistics.median(res["fedcore"]["cpu_s"]) / ref_cpu
    print(f"RATIO fedcore/torch = {ratio:.3f} wall, {cpu_ratio:.3f} CPU (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
