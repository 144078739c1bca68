"""SplitFed V1 with clients running in parallel (threads) vs sequential split learning: wall-time ratio.

    nice python benchmarks/split_parallel.py [--clients 4] [--rounds 2] [--repeats 2] [--vit-s]

After one untimed warm-up run of each, the same client work (``clients x rounds`` local updates of one
epoch each, micro ViT or ``--vit-s`` width 384 / depth 6, digits 5-9 split IID over ``clients``) is
done three ways, interleaved ``repeats`` times (``benchmarks/sidebyside.py``; ratios per pair, minimum and median):

* vanilla SL (``sl``): one client per round, ``clients x rounds`` rounds, clients strictly in turn;
* SplitFed V1, inline executor: ``clients`` per round, ``rounds`` rounds, clients run one after another;
* SplitFed V1, thread executor: the same, each round's clients run in Python threads (torch releases
  the GIL inside its kernels, one intra-op thread per client). This is the script's own small runner, not
  fedcore's ``threads`` executor, which refuses shares with a server endpoint (it cannot tell V1's per-client
  server copies from V2's one segment stepped in client order).

Threads are safe for SplitFed V1 because each client's session has its own server copy
(``ServerCopies``; split and download happen in the engine before the jobs start); the run's final
model is checked to be identical to the inline run. They are *not* safe for SplitFed V2 / SL, whose
single server segment is stepped in client order. We chose threads over a batched server forward
(concatenating the clients' smashed data into one encoder call) because V1's server copies differ per
client after their first step, so a batched forward would need a per-client vmap over copies. The
speed-up is bounded by the free cores: on the shared 2-core machine it is at most 2x.
"""
from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from sidebyside import interleave
import torch

from fedcore import Pipeline
from fedcore.builtin import IIDPartition, UniformSync
from fedcore.data import load_digits
from fedcore.engine.client_job import run_cohort
from fedcore.models import micro_vit
from fedcore_split import SplitFedV1, VanillaSL


class ThreadExecutor:
    """Runs a round's client jobs in threads (results in the order given)."""

    name = "threads"

    def start(self, pipeline, dataset) -> None:
        self._hooks, self._dataset = pipeline.hooks, dataset
        self._pool = ThreadPoolExecutor(max_workers=16)

    def run(self, jobs):
        def one(job):
            torch.set_num_threads(1)
            return run_cohort(self._hooks, [job], self._dataset)[0]
        return list(self._pool.map(one, jobs))

    def close(self) -> None:
        self._pool.shutdown()


def model(vit_s: bool):
    torch.manual_seed(0)
    size = dict(embed_dim=384, depth=6, num_heads=6, mlp_ratio=4.0) if vit_s else {}
    return micro_vit(num_classes=5, **size)


def run(kind: str, a, train) -> tuple[float, dict]:
    comp = dict(batch_size=32, epochs=1)
    if kind == "sl":
        pipe, rounds, executor = Pipeline([IIDPartition(), VanillaSL(**comp)]), a.clients * a.rounds, None
    else:
        pipe, rounds = Pipeline([IIDPartition(), UniformSync(), SplitFedV1(**comp)]), a.rounds
        executor = ThreadExecutor() if kind == "v1-threads" else None
    t0 = time.perf_counter()
    res = pipe.run(model=model(a.vit_s), train=train, test=None, num_clients=a.clients, rounds=rounds, seed=0,
                   executor=executor)
    return time.perf_counter() - t0, res.model.state_dict()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--vit-s", action="store_true")
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    train, _ = load_digits(classes=(5, 6, 7, 8, 9))
    states: dict[str, dict] = {}
    warm = argparse.Namespace(**{**vars(a), "rounds": 1})
    kinds = ("sl", "v1-inline", "v1-threads")
    for kind in kinds:  # warm-up (first-call allocations and imports), not timed
        run(kind, warm, train)

    def contender(kind: str):
        def go() -> float:
            sec, states[kind] = run(kind, a, train)
            return sec
        return go

    runs = interleave({kind: contender(kind) for kind in kinds}, reps=a.repeats)
    runs.print_header(f"split learning: {a.clients} clients x {a.rounds} rounds of client work, "
                      f"{'ViT-S width' if a.vit_s else 'micro'} ViT, {len(train)} samples", unit="wall s per run")
    runs.print_times()
    runs.print_ratio("sl", "v1-threads", label="SL / SplitFed V1 threads")
    runs.print_ratio("sl", "v1-inline", label="SL / SplitFed V1 inline")
    runs.print_ratio("v1-inline", "v1-threads", label="V1 inline / V1 threads (thread speed-up)")
    same = all(torch.equal(states["v1-inline"][k], states["v1-threads"][k]) for k in states["v1-inline"])
    print(f"  threaded V1 final model identical to inline V1: {same}")


if __name__ == "__main__":
    main()
