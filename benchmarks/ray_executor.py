"""Ray executor vs inline: client jobs per second on this machine, and the determinism check.

    python benchmarks/ray_executor.py [--clients 10 --rounds 3 --epochs 2]

Same FedAvg job (embedded digits, micro ViT, IID, every client every round) three ways: inline with
one torch thread, inline with two, and on a local Ray cluster with 2 actors of one thread each.
Ray start-up (cluster and actors) and the first round (fresh workers import torch/timm
while running it) are timed apart from the later rounds, whose clients/s are compared. The check: the Ray history, ledger
and final model are identical to the one-thread inline run.
"""
from __future__ import annotations

import argparse
import time

import torch

from fedcore.builtin import IIDPartition, SGDUpdate, UniformSync
from fedcore.data import load_digits
from fedcore.engine.executor import InlineExecutor
from fedcore.models import micro_vit
from fedcore.pipeline import Pipeline


class Timed:
    """Wraps an executor to time only its client work (not set-up)."""

    def __init__(self, inner):
        self.inner, self.calls, self.start_s = inner, [], 0.0

    def start(self, pipeline, dataset):
        t = time.perf_counter()
        self.inner.start(pipeline, dataset)
        self.start_s = time.perf_counter() - t

    def run(self, jobs):
        t = time.perf_counter()
        out = self.inner.run(jobs)
        self.calls.append((len(jobs), time.perf_counter() - t))
        return out

    @property
    def warm(self) -> tuple[int, float]:
        """(jobs, seconds) after the first round, whose jobs also pay for imports in fresh workers."""
        rest = self.calls[1:]
        return sum(n for n, _ in rest), sum(t for _, t in rest)

    def close(self):
        self.inner.close()


def job(executor, args, data):
    train, test = data
    torch.manual_seed(0)
    pipe = Pipeline([IIDPartition(), UniformSync(), SGDUpdate(lr=0.05, epochs=args.epochs, batch_size=32)])
    return pipe.run(model=micro_vit(num_classes=10), train=train, test=test, num_clients=args.clients,
                    rounds=args.rounds, seed=0, executor=executor)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    data = load_digits(seed=0)
    rows = []
    results = {}
    for label, threads in (("inline, 1 thread", 1), ("inline, 2 threads", 2)):
        torch.set_num_threads(threads)
        ex = Timed(InlineExecutor())
        results[label] = job(ex, args, data)
        rows.append((label, *ex.warm, ex.calls[0][1], 0.0))
    torch.set_num_threads(1)
    import ray

    from fedcore.engine.ray_executor import RayExecutor

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster_s = time.perf_counter() - t
    ex = Timed(RayExecutor(num_workers=2, threads_per_worker=1))
    results["ray, 2 workers"] = job(ex, args, data)
    rows.append(("ray, 2 workers x 1 thread", *ex.warm, ex.calls[0][1], cluster_s + ex.start_s))
    ray.shutdown()
    base = rows[0][1] / rows[0][2]
    print(f"{args.clients} clients x {args.rounds} rounds x {args.epochs} epochs, micro ViT on digits, "
          f"{torch.get_num_interop_threads()} interop threads")
    print("rounds after the first are timed; the first round (imports in fresh workers) and start-up are shown apart")
    print(f"{'executor':28s}{'jobs':>6s}{'client work (s)':>17s}{'clients/s':>11s}{'vs inline-1':>13s}"
          f"{'round 1 (s)':>13s}{'start-up (s)':>14s}")
    for label, jobs, busy, first, startup in rows:
        print(f"{label:28s}{jobs:6d}{busy:17.2f}{jobs / busy:11.2f}{(jobs / busy) / base:13.2f}{first:13.2f}{startup:14.2f}")
    ref, ray_run = results["inline, 1 thread"], results["ray, 2 workers"]
    same_history = ref.history.comparable() == ray_run.history.comparable()
    same_ledger = ref.ledger.to_rows() == ray_run.ledger.to_rows()
    same_model = all(torch.equal(v, ray_run.model.state_dict()[k]) for k, v in ref.model.state_dict().items())
    two = results["inline, 2 threads"]
    print(f"determinism: Ray vs inline (1 thread): history {'identical' if same_history else 'DIFFERENT'}, "
          f"ledger {'identical' if same_ledger else 'DIFFERENT'}, model {'identical' if same_model else 'DIFFERENT'}")
    print(f"             inline 2 threads vs 1 thread: history "
          f"{'identical' if two.history.comparable() == ref.history.comparable() else 'different (intra-op threads change float sums)'}")


if __name__ == "__main__":
    main()
