"""Vectorised cohorts side by side, interleaved: the demo under ``on_cpu = "auto"``, SA-FedLoRA's LoRA stage, PromptFL.

    python benchmarks/vectorised_cohorts.py                                  # every case, 5 repetitions, CPU, 1 thread
    python benchmarks/vectorised_cohorts.py --cases demo --reps 7
    python benchmarks/vectorised_cohorts.py --cases fedlora --clients 10 50 --reps 5 --rounds 6

``demo``: the whole ``examples/fedavg_dirichlet.toml`` run as ``fedcore run`` does it (``run_experiment``: run
directory, checkpoints, progress observer; 10 clients, micro CNN, 10 rounds) with ``cohort = "per-job"`` against
``cohort = "vectorised"`` (``on_cpu = "auto"``) with a fresh probe cache every run (so every run pays the probe),
with the cache this machine already holds (the choice is read, nothing is timed), and forced to vectorise (what
the former 2-MFLOP rule chose for this 1.81-MFLOP CNN). Target: ``auto`` is not slower than ``per-job``.

``fedlora``: SA-FedLoRA's LoRA stage (the ``fedlora`` recipe: rank-8 factors and the head on a frozen micro ViT of
width 32, depth 2, on the digits, 20 samples per client, 1 local epoch at batch 10), ``per-job`` against
``vectorised`` (forced), per steady round (share, training, upload, aggregation; no evaluation). Target >= 1.5x.

``promptfl``: the ``promptfl`` recipe on fedcore's random-initialised tiny CLIP and the colour shapes (2 shots of 2
random classes per client, 2 local epochs at batch 2), ``per-job`` against ``vectorised-prompt``. Target >= 1.5x.

The contenders of a case run in turn (A, B, A, B, ...) ``--reps`` times; each ratio is per pair (per-job time over
the other's), and the table gives their minimum and median, of wall time and of process CPU time, with the load
average before and after each case and the machine. Each contender first runs once untimed (warm-up).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sidebyside import interleave, load_average, machine  # noqa: E402

import fedcore  # noqa: E402

DEMO = HERE.parent / "examples" / "fedavg_dirichlet.toml"


def steady(pipe: Any, **run: Any) -> dict[str, float]:
    """Mean wall and process-CPU seconds per round after the first (the warm-up)."""
    walls, cpus = [time.perf_counter()], [time.process_time()]

    def stamp(row: dict[str, Any]) -> None:
        walls.append(time.perf_counter())
        cpus.append(time.process_time())

    pipe.run(on_round=stamp, **run)
    return {"wall": (walls[-1] - walls[1]) / (len(walls) - 2), "cpu": (cpus[-1] - cpus[1]) / (len(cpus) - 2)}


def fedlora(clients: int, cohort: Any, rounds: int) -> dict[str, float]:
    from fedcore.data import load_digits
    from fedcore.models import micro_vit

    train, _ = load_digits()
    torch.manual_seed(0)
    model = micro_vit(num_classes=10, embed_dim=32, depth=2, num_heads=2)
    pipe = fedcore.recipe("fedlora", cohort=cohort, partition={"name": "iid"},
                          local_update={"e2_local_epochs": 1, "batch_size": 10})
    sub = train.subset(range(20 * clients))
    return steady(pipe, model=model, train=sub, test=None, num_clients=clients, rounds=rounds, seed=0,
                  eval_every=10 ** 6)


def promptfl(clients: int, cohort: Any, rounds: int) -> dict[str, float]:
    from fedcore_clip import prompted_clip
    from fedcore_clip.testing import shapes_data, tiny_backbone

    train, test = shapes_data(2 * clients, 1, 6, stream="bench")
    pipe = fedcore.recipe("promptfl", cohort=cohort, partition={"shots": 2, "mode": "random_classes"},
                          local_update={"lr": 0.05, "epochs": 2, "batch_size": 2})
    model = prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=0)
    return steady(pipe, model=model, train=train, test=test, num_clients=clients, rounds=rounds, seed=0,
                  eval_every=10 ** 6)


def demo_run(cohort: str, cache: str) -> dict[str, Any]:
    """One whole ``fedcore run`` of the demo (config loading and data outside the clock, as for every side)."""
    from fedcore.experiment.runner import prepare, run_experiment

    os.environ["FEDCORE_CACHE"] = cache
    m = prepare(DEMO, [f"pipeline.cohort={cohort}"])
    with tempfile.TemporaryDirectory() as out:
        wall, cpu = time.perf_counter(), time.process_time()
        done = run_experiment(m, out=Path(out) / "run", progress="none")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        choice = json_choice(Path(out) / "run" / "manifest.json")
    return {"wall": wall, "cpu": cpu, "accuracy": done.rows[-1]["test_accuracy"], "choice": choice,
            "vectorised": sum(r.get("cohort_vectorised", 0) for r in done.rows)}


def json_choice(manifest: Path) -> str:
    import json

    decided = json.loads(manifest.read_text()).get("decided", {}).get("vectorised-cohort", {})
    return ", ".join(f"{r['choice']} ({r['by']})" for r in decided.values()) or "-"


def table(rows: list[list[str]]) -> None:
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows[1:]:
        print("| " + " | ".join(r) + " |", flush=True)


def ratios(base: list[dict[str, float]], other: list[dict[str, float]], key: str) -> str:
    r = [b[key] / o[key] for b, o in zip(base, other)]
    return f"{min(r):.2f}x / {statistics.median(r):.2f}x"


def demo_case(reps: int) -> None:
    warm = tempfile.mkdtemp(prefix="fedcore-probe-cache-")  # interleave's untimed warm-up run fills it first
    contenders = {
        "per-job": lambda: demo_run("per-job", warm),
        "vectorised, auto, fresh cache (probes)": lambda: demo_run("vectorised", tempfile.mkdtemp()),
        "vectorised, auto, cached choice": lambda: demo_run("vectorised", warm),
        "vectorised, forced (the former rule's choice)": lambda: demo_run('{name="vectorised", on_cpu="vectorise"}',
                                                                          warm),
    }
    print(f"\n### demo: {DEMO.name}, whole run, {reps} repetitions interleaved\n\n"
          f"load average {load_average():.2f} (before)\n")
    times = interleave(contenders, reps=reps, warmup=1).results
    rows = [["side", "wall s (median)", "CPU s (median)", "speed-up vs per-job, wall min / median",
             "CPU min / median", "auto's choice", "final accuracy"]]
    base = times["per-job"]
    for name, results in times.items():
        rows.append([name, f"{statistics.median(r['wall'] for r in results):.2f}",
                     f"{statistics.median(r['cpu'] for r in results):.2f}",
                     "-" if name == "per-job" else ratios(base, results, "wall"),
                     "-" if name == "per-job" else ratios(base, results, "cpu"),
                     results[0]["choice"], f"{results[0]['accuracy']:.4f}"])
    table(rows)
    print(f"\nload average {load_average():.2f} (after); target: auto not slower than per-job (speed-up >= 1.00)")


def steady_case(name: str, fn: Any, vectorised: Any, clients: list[int], rounds: int, reps: int) -> None:
    print(f"\n### {name}: per-job vs {vectorised}, {rounds} rounds per run (first = warm-up), {reps} repetitions "
          f"interleaved; target >= 1.5x\n")
    rows = [["clients", "per-job s/round (median)", "vectorised s/round (median)", "speed-up, wall min / median",
             "CPU min / median", "load average before / after (1 min)"]]
    for n in clients:
        before = os.getloadavg()[0]
        times = interleave({"per-job": lambda n=n: fn(n, "per-job", rounds),
                            "vectorised": lambda n=n: fn(n, vectorised, rounds)}, reps=reps, warmup=1).results
        rows.append([str(n), f"{statistics.median(r['wall'] for r in times['per-job']):.3f}",
                     f"{statistics.median(r['wall'] for r in times['vectorised']):.3f}",
                     ratios(times["per-job"], times["vectorised"], "wall"),
                     ratios(times["per-job"], times["vectorised"], "cpu"), f"{before:.2f} / {os.getloadavg()[0]:.2f}"])
    table(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["demo", "fedlora", "promptfl"],
                    choices=["demo", "fedlora", "promptfl"])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(machine())
    print(f"load average {load_average():.2f}")
    if "demo" in args.cases:
        demo_case(args.reps)
    if "fedlora" in args.cases:
        steady_case("SA-FedLoRA (LoRA stage)", fedlora, {"name": "vectorised", "on_cpu": "vectorise"}, args.clients,
                    args.rounds, args.reps)
    if "promptfl" in args.cases:
        steady_case("PromptFL", promptfl, "vectorised-prompt", args.clients, args.rounds, args.reps)


if __name__ == "__main__":
    main()
