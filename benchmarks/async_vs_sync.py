"""Async vs sync in virtual time: FedBuff against synchronous FedAvg on heterogeneous device profiles.

    python benchmarks/async_vs_sync.py [--seeds 0 1]

The shape of FedScale's published comparison (Lai et al., ICML 2022; FedBuff, Nguyen et al. 2022):
on a heterogeneous population, buffered asynchronous aggregation reaches the same accuracy in less
virtual time than synchronous FedAvg, because a synchronous round lasts as long as its slowest
client. Scaled down to this machine: the embedded 8x8 digits (1,437 train / 360 test), 30 clients
with Dirichlet(1.0) label skew, the micro CNN, 10 clients in flight for both (sync samples 10 per
round; FedBuff keeps 10 busy and aggregates every K arrivals with its staleness-discounted delta
step, K=10 = the same updates per server step as sync, and K=5), 400 client updates per run. Virtual time
comes from the cost model (FLOPs of the real forward/backward) and the bytes
each job moved, on two populations: Tree Learning's watch:phone:laptop = 4:2:2 mix, and a milder
phone:laptop = 1:1 mix. Printed: virtual seconds to first reach each accuracy target, the saving,
the client updates used until then, wall-clock seconds, and the clients' utilisation.
"""
from __future__ import annotations

import argparse
import time

import torch

from fedcore.builtin import BufferedSchedule, DirichletPartition, FedAvg, FedBuffStep, SGDUpdate, UniformSync
from fedcore.data import load_digits
from fedcore.models import micro_cnn
from fedcore.pipeline import Pipeline
from fedcore.runtime import ProfileAssignment, SimClock

N, IN_FLIGHT = 30, 10
TARGETS = (0.80, 0.85, 0.90, 0.93)
POPULATIONS = {"watch:phone:laptop 4:2:2": {"watch": 4, "phone": 2, "laptop": 2},
               "phone:laptop 1:1": {"phone": 1, "laptop": 1}}


def run(schedule, aggregate, rounds: int, weights: dict[str, int], seed: int, data):
    train, test = data
    torch.manual_seed(seed)
    pipe = Pipeline([DirichletPartition(alpha=1.0, min_size=10), schedule,
                     SGDUpdate(lr=0.05, momentum=0.9, batch_size=16), aggregate])
    start = time.perf_counter()
    result = pipe.run(model=micro_cnn(num_classes=10), train=train, test=test, num_clients=N, rounds=rounds, seed=seed,
                      clock=SimClock(), profiles=ProfileAssignment(weights=weights))
    return result.history, time.perf_counter() - start


def time_to(history, target: float) -> tuple[float | None, int | None]:
    """(virtual seconds, client updates aggregated) when ``target`` accuracy is first reached."""
    updates = 0
    for row in history:
        updates += len(row["clients"])
        if row.get("test_accuracy", 0.0) >= target:
            return row["virtual_time"], updates
    return None, None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--updates", type=int, default=400, help="client updates per run (all runs alike)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_digits(seed=0)
    for label, weights in POPULATIONS.items():
        print(f"\npopulation {label}: {N} clients, {IN_FLIGHT} in flight, {args.updates} client updates per run")
        print(f"  {'seed':>4s} {'target':>6s} | {'virtual seconds to reach it':^38s} | {'saving vs sync':^17s} |"
              f" {'client updates used':^22s}")
        print(f"  {'':4s} {'':6s} | {'sync':>10s} {'FedBuff K=10':>13s} {'FedBuff K=5':>12s} |"
              f" {'K=10':>8s} {'K=5':>8s} | {'sync':>6s} {'K=10':>6s} {'K=5':>6s}")
        savings: dict[int, list[float]] = {10: [], 5: []}
        for seed in args.seeds:
            runs = {"sync": run(UniformSync(fraction=IN_FLIGHT / N), FedAvg(), args.updates // IN_FLIGHT, weights,
                                seed, data)}
            for k in (10, 5):
                runs[k] = run(BufferedSchedule(buffer_size=k, concurrency=IN_FLIGHT), FedBuffStep(), args.updates // k,
                              weights, seed, data)
            for target in TARGETS:
                reached = {key: time_to(h, target) for key, (h, _) in runs.items()}
                base = reached["sync"][0]
                cells = []
                for k in (10, 5):
                    t = reached[k][0]
                    if base and t:
                        savings[k].append(1 - t / base)
                        cells.append(f"{1 - t / base:8.1%}")
                    else:
                        cells.append(f"{'-':>8s}")
                fmt = lambda v, w: f"{v:{w}.2f}" if v else f"{'-':>{w}s}"  # noqa: E731
                used = lambda key, reached=reached: (  # noqa: E731  (this target's times, bound here)
                    f"{reached[key][1]:6d}" if reached[key][1] else f"{'-':>6s}")
                print(f"  {seed:4d} {target:6.2f} | {fmt(base, 10)} {fmt(reached[10][0], 13)} "
                      f"{fmt(reached[5][0], 12)} |"
                      f" {cells[0]} {cells[1]} | {used('sync')} {used(10)} {used(5)}")
            for key, name in (("sync", "sync FedAvg"), (10, "FedBuff K=10"), (5, "FedBuff K=5")):
                h, wall = runs[key]
                print(f"       {name:13s} final accuracy {h[-1]['test_accuracy']:.3f} at {h[-1]['virtual_time']:6.2f}"
                      f" virtual s, utilisation {h[-1]['utilisation']:.2f}, max staleness "
                      f"{max(r.get('max_staleness', 0) for r in h)}, wall {wall:.1f} s")
        for k in (10, 5):
            if savings[k]:
                print(f"  mean virtual-time saving of FedBuff K={k} over sync FedAvg: "
                      f"{sum(savings[k]) / len(savings[k]):.1%} over {len(savings[k])} (seed, target) pairs")
    print("\nFedScale's published shape: FedBuff reaches the same accuracy in about 30% less virtual time.")


if __name__ == "__main__":
    main()
