"""Ray and threads executors vs inline: client jobs per second on this machine, and the determinism check.

    python benchmarks/ray_executor.py [--clients 10 --rounds 4 --epochs 2 --reps 3]

Same FedAvg job (embedded digits, micro ViT, IID, every client every round) four ways, interleaved
(``benchmarks/sidebyside.py``): inline with one torch thread, inline with two, the threads executor with 2 workers
of one thread each, and a local Ray cluster (started once) with 2 actors of one thread each. Executor start-up
(actors) and the first round (fresh workers import torch/timm while running it) are timed apart from the later
rounds, whose clients/s are compared, per pair, against inline with one thread. The check: the threads and Ray
histories, ledgers and final models are identical to the one-thread inline run.
"""
from __future__ import annotations

import argparse
import time

from sidebyside import interleave
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


def contender(label: str, make, threads: int, args, data, results: dict):
    """One run with a fresh executor: clients/s after the first round, round 1 and start-up seconds."""
    def run() -> dict[str, float]:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            ex = Timed(make())
            results[label] = job(ex, args, data)
        finally:
            torch.set_num_threads(before)
        jobs, busy = ex.warm
        return {"clients_per_s": jobs / busy, "first_s": ex.calls[0][1], "startup_s": ex.start_s}
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    data = load_digits(seed=0)
    torch.set_num_threads(1)
    import ray

    from fedcore.engine.ray_executor import RayExecutor
    from fedcore.engine.threads_executor import ThreadsExecutor

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cluster_s = time.perf_counter() - t
    results: dict = {}
    runs = interleave({
        "inline, 1 thread": contender("inline, 1 thread", InlineExecutor, 1, args, data, results),
        "inline, 2 threads": contender("inline, 2 threads", InlineExecutor, 2, args, data, results),
        "threads, 2 workers x 1": contender("threads, 2 workers x 1", lambda: ThreadsExecutor(workers=2), 1, args,
                                           data, results),
        "ray, 2 workers x 1": contender("ray, 2 workers x 1", lambda: RayExecutor(num_workers=2, threads_per_worker=1),
                                       1, args, data, results),
    }, reps=args.reps)
    ray.shutdown()
    runs.print_header(f"executors: {args.clients} clients x {args.rounds} rounds x {args.epochs} epochs, micro ViT on "
                      f"digits; clients/s over the rounds after the first (round 1 and start-up shown apart)",
                      ray_cluster_start=f"{cluster_s:.1f} s (once)")
    for key, unit in (("clients_per_s", "clients/s"), ("first_s", "s"), ("startup_s", "s")):
        runs.print_times(key, unit=unit)
    for label in ("inline, 2 threads", "threads, 2 workers x 1", "ray, 2 workers x 1"):
        runs.print_ratio(label, "inline, 1 thread", key="clients_per_s")
    ref = results["inline, 1 thread"]
    for label in ("threads, 2 workers x 1", "ray, 2 workers x 1"):
        other = results[label]
        same_history = ref.history.comparable() == other.history.comparable()
        same_ledger = ref.ledger.to_rows() == other.ledger.to_rows()
        same_model = all(torch.equal(v, other.model.state_dict()[k]) for k, v in ref.model.state_dict().items())
        word = {True: "identical", False: "DIFFERENT"}
        print(f"  determinism, {label} vs inline (1 thread): history {word[same_history]}, ledger "
              f"{word[same_ledger]}, model {word[same_model]}")
    two = results["inline, 2 threads"].history.comparable() == ref.history.comparable()
    print(f"  inline 2 threads vs 1 thread: history "
          f"{'identical' if two else 'different (intra-op threads change float sums)'}")


if __name__ == "__main__":
    main()
