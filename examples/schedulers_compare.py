"""Four schedulers, one FedAvg job, a heterogeneous population with faults: accuracy against virtual time.

    python examples/schedulers_compare.py                      # inline executor
    python examples/schedulers_compare.py --executor both      # inline and Ray, checks they agree
    fedcore report runs/schedulers/*                           # (its report is written at the end)

20 clients on the embedded digits (Dirichlet 1.0 label skew, micro CNN) with Tree Learning's
watch:phone:laptop = 4:2:2 device mix; seeded faults: 5 % offline at dispatch, 5 % drop out
mid-round, 5 % of uploads lost. The pipeline is identical except for the schedule slot (the
aggregator is FedAvg for all four; staleness is handed to it and FedAvg ignores it):

  sync        10 sampled clients per round, 0.2 s deadline (watches, ~0.24 s per job, are dropped)
  async       FedAsync: 10 clients in flight, aggregate on every arrival
  buffered    FedBuff: 10 clients in flight, aggregate every 5 arrivals
  semi-async  Co-S2P: every idle client starts; wait for 0.5·N arrivals, then 0.05 s more

Each gets about the same number of client updates (200). Each run writes RUN_DIR/metrics.jsonl
(one history row per aggregation, with virtual_time) and status.json. ``--staleness-aware`` swaps
FedAvg for FedAsync's mixing (async) and FedBuff's delta step (buffered): FedAvg replaces the model
with one client's on every FedAsync arrival, which is unstable under label skew.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fedcore import Pipeline
from fedcore.builtin import (
    AsyncSchedule,
    BufferedSchedule,
    DirichletPartition,
    FedAsyncMix,
    FedAvg,
    FedBuffStep,
    SemiAsyncSchedule,
    SGDUpdate,
    UniformSync,
)
from fedcore.data import load_digits
from fedcore.models import micro_cnn
from fedcore.runtime import Faults, ProfileAssignment, SimClock

N = 20
SCHEDULES = {  # name -> (schedule, aggregations for ~200 client updates)
    "sync": (UniformSync(fraction=0.5, deadline=0.2), 20),
    "async": (AsyncSchedule(concurrency=10), 200),
    "buffered": (BufferedSchedule(buffer_size=5, concurrency=10), 40),
    "semi-async": (SemiAsyncSchedule(mu=0.5, t_clk=0.05), 20),
}


def run_one(name: str, executor_name: str, data, eval_every: int, staleness_aware: bool):
    schedule, rounds = SCHEDULES[name]
    executor = None
    if executor_name == "ray":
        from fedcore.plugins import lookup

        executor = lookup("executor", "ray").obj(num_workers=2)  # the executor `executor = "ray"` names
    train, test = data
    torch.manual_seed(0)
    aggregate = FedAvg()
    if staleness_aware and name in ("async", "buffered"):
        aggregate = FedAsyncMix() if name == "async" else FedBuffStep()
    pipe = Pipeline([DirichletPartition(alpha=1.0, min_size=10), schedule,
                     SGDUpdate(lr=0.05, momentum=0.9, batch_size=16), aggregate])
    return pipe.run(model=micro_cnn(num_classes=10), train=train, test=test, num_clients=N, rounds=rounds, seed=0,
                    eval_every=eval_every, executor=executor, clock=SimClock(),
                    profiles=ProfileAssignment(weights={"watch": 4, "phone": 2, "laptop": 2}),
                    faults=Faults(dropout_before=0.05, dropout_during=0.05, lost_upload=0.05))


def write_run(path: Path, result) -> None:
    path.mkdir(parents=True, exist_ok=True)
    result.history.write_jsonl(path / "metrics.jsonl")
    (path / "status.json").write_text(json.dumps({"state": "finished", "rounds_done": len(result.history)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("inline", "ray", "both"), default="inline")
    parser.add_argument("--out", default="runs/schedulers")
    parser.add_argument("--staleness-aware", action="store_true", help="FedAsync mixing / FedBuff step aggregators")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_digits(seed=0)
    out = Path(args.out)
    dirs = []
    for name in SCHEDULES:
        eval_every = 10 if name == "async" else 2
        executors = ("inline", "ray") if args.executor == "both" else (args.executor,)
        results = {ex: run_one(name, ex, data, eval_every, args.staleness_aware) for ex in executors}
        result = results[executors[0]]
        if len(results) == 2:
            same = results["inline"].history.comparable() == results["ray"].history.comparable()
            print(f"{name:11s} inline vs Ray: {'identical histories' if same else 'HISTORIES DIFFER'}")
        h = result.history
        faults = {k: sum(len(r.get(k, [])) for r in h)
                  for k in ("unavailable", "dropout", "lost", "cancelled", "failed")}
        print(f"{name:11s} {len(h):4d} aggregations  accuracy {h.last('test_accuracy'):.3f}  virtual time "
              f"{h[-1]['virtual_time']:6.2f} s  utilisation {h[-1]['utilisation']:.2f}  events {faults}")
        dirs.append(out / name)
        write_run(out / name, result)
    from fedcore.experiment import load_runs, write_report

    report, files, _, metric = write_report(load_runs(dirs), out / "report")
    print(f"run directories: {', '.join(map(str, dirs))}; report ({metric}): {report} ({len(files)} plots)")


if __name__ == "__main__":
    main()
