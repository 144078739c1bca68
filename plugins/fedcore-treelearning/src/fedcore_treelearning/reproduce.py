"""Spec 003a A8, scaled to a 2-core CPU: ``python -m fedcore_treelearning.reproduce [--quick]``.

Writes the results between the ``<!-- reproduce:... -->`` markers of the plugin README and two plots beside it:

1. partitioner correctness: branch and bound == exhaustive search on 200 seeded random instances;
2. the simulated speed-up table (:mod:`fedcore_treelearning.speedup`), horizontal and vertical, C = 1..20;
3. accuracy parity and time-to-accuracy on the micro task (8x8 digits, micro CNN, 4 clients of mixed tiers,
   3 seeds, mean +- std, paired t-test TL vs SL), horizontal and vertical;
4. dropout robustness (ceil(10 % C) clients offline for 5 iterations in round 2, substitutes on);
5. the resource table (Tab. 3.2 analogue);
6. horizontal accuracy parity with and without ``client_sync = "fedavg_common_layers"`` (``--only parity`` runs
   just this part).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import math
from pathlib import Path
import random
import statistics
import time
from typing import Any

import torch

import fedcore
from fedcore.data import load_digits
from fedcore.models import micro_cnn
from fedcore_treelearning import speedup
from fedcore_treelearning.cost import SplitProblem
from fedcore_treelearning.solver import branch_and_bound, exhaustive

README = Path(__file__).resolve().parents[2] / "README.md"
SEEDS = (0, 1, 2)
TIERS = ["tl-low", "tl-low", "tl-medium", "tl-high"]
HORIZONTAL = ("sl-round-robin", "tree-learning")  # the ablations differ in time only: see the speed-up table
VERTICAL = ("sl-sync", "tree-learning-vertical")
SYNCED = "tree-learning + client_sync"  # FedAvg of the client units several clients hold, each round
DROPOUT = {"dropout_fraction": 0.1, "dropout_round": 2, "dropout_start": 3, "dropout_iterations": 5}


# -- 1. partitioner ----------------------------------------------------------------------------

def partitioner_check(instances: int = 200) -> tuple[int, int]:
    rng = random.Random(0)
    same = 0
    for _ in range(instances):
        n, c = rng.randint(2, 8), rng.randint(1, 6)
        problem = SplitProblem(unit_flops=[rng.uniform(1, 100) for _ in range(n)],
                               feature_bytes=[rng.uniform(1, 100) for _ in range(n)],
                               client_speeds=[rng.choice([1.0, 2.0, 4.0]) for _ in range(c)],
                               client_bandwidths=[rng.uniform(1, 50) for _ in range(c)],
                               server_speed=rng.uniform(5, 200))
        same += math.isclose(branch_and_bound(problem).time, exhaustive(problem).time, rel_tol=1e-12)
    return same, instances


# -- 3./4. training runs -----------------------------------------------------------------------

def train_run(recipe: str, seed: int, rounds: int, **overrides: Any) -> dict[str, list[float]]:
    train, test = load_digits()
    torch.manual_seed(seed)
    model = micro_cnn(num_classes=10, in_chans=1, width=16)
    pipe = fedcore.recipe(recipe, split={"batch_size": 16, "server_lr": 0.03}, cohort={"lr": 0.03, **overrides})
    result = pipe.run(model=model, train=train, test=test, num_clients=len(TIERS), rounds=rounds, seed=seed,
                      profiles=TIERS)
    sim = list(result.history.column("agg_tl_sim_s"))
    return {"accuracy": list(result.history.column("test_accuracy")),
            "time": [sum(sim[:i + 1]) for i in range(len(sim))]}


def time_to(run: dict[str, list[float]], target: float) -> float:
    return next((t for a, t in zip(run["accuracy"], run["time"]) if a >= target), math.inf)


def mean_std(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        return f"not reached in {len(values) - len(finite)}/{len(values)}"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def paired(a: Sequence[float], b: Sequence[float]) -> str:
    """Mean of a - b ± std, and the paired t-test's p (two-sided)."""
    from scipy.stats import ttest_rel

    diff = [x - y for x, y in zip(a, b)]
    if not all(math.isfinite(d) for d in diff):
        return "n/a"
    sd = statistics.stdev(diff) if len(diff) > 1 else 0.0
    p = float(ttest_rel(a, b).pvalue) if sd > 0 else float("nan")
    return f"{statistics.mean(diff):+.3f} ± {sd:.3f} (p={p:.2f})"


def accuracy_section(rounds: int, seeds: Sequence[int]) -> tuple[list[str], dict[str, list[dict[str, list[float]]]]]:
    """Horizontal runs get ``rounds`` epochs, vertical ones half as many (every vertical client sees every sample)."""
    runs: dict[str, list[dict[str, list[float]]]] = {}
    vertical = max(1, rounds // 2)
    for recipe in HORIZONTAL:
        runs[recipe] = [train_run(recipe, s, rounds) for s in seeds]
    for recipe in VERTICAL:
        runs[recipe] = [train_run(recipe, s, vertical) for s in seeds]
    runs["tree-learning + dropout"] = [train_run("tree-learning", s, rounds, **DROPOUT) for s in seeds]
    runs["tree-learning-vertical + dropout"] = [train_run("tree-learning-vertical", s, vertical, **DROPOUT)
                                                for s in seeds]
    lines = ["| mode | recipe | final accuracy | vs SL (paired) | simulated s / epoch | time to 95 % of SL's final "
             "accuracy (s) |", "|---|---|---|---|---|---|"]
    for mode, names, base in (("horizontal", HORIZONTAL + ("tree-learning + dropout",), "sl-round-robin"),
                              ("vertical", VERTICAL + ("tree-learning-vertical + dropout",), "sl-sync")):
        target = 0.95 * statistics.mean(r["accuracy"][-1] for r in runs[base])
        for name in names:
            final = [r["accuracy"][-1] for r in runs[name]]
            epoch = [r["time"][-1] / len(r["time"]) for r in runs[name]]
            vs = "—" if name == base else paired(final, [r["accuracy"][-1] for r in runs[base]])
            lines.append(f"| {mode} | `{name}` | {mean_std(final)} | {vs} | {mean_std(epoch)} | "
                         f"{mean_std([time_to(r, target) for r in runs[name]])} |")
    return lines, runs


def parity_section(rounds: int, seeds: Sequence[int],
                   runs: dict[str, list[dict[str, list[float]]]] | None = None) -> list[str]:
    """Horizontal SL vs TL with personal client parts (the thesis) and with ``client_sync``; reuses ``runs``."""
    runs = dict(runs or {})
    for recipe in HORIZONTAL:
        if recipe not in runs:
            runs[recipe] = [train_run(recipe, s, rounds) for s in seeds]
    runs[SYNCED] = [train_run("tree-learning", s, rounds, client_sync="fedavg_common_layers") for s in seeds]
    base = [r["accuracy"][-1] for r in runs["sl-round-robin"]]
    lines = [f"| recipe ({rounds} epochs, {len(seeds)} seeds) | client_sync | final accuracy | vs SL (paired) |",
             "|---|---|---|---|"]
    for name, sync in (("sl-round-robin", "— (relayed)"), ("tree-learning", "`none`"),
                       (SYNCED, "`fedavg_common_layers`")):
        final = [r["accuracy"][-1] for r in runs[name]]
        vs = "—" if name == "sl-round-robin" else paired(final, base)
        lines.append(f"| `{name.split(' ')[0]}` | {sync} | {mean_std(final)} | {vs} |")
    return lines


# -- tables and plots --------------------------------------------------------------------------

def speedup_lines(rows: Sequence[speedup.SpeedupRow]) -> list[str]:
    lines = ["| model | mode | C | SL (s) | TL-noPartition (s) | TL-syncOptimal (s) | TL (s) | SL / TL | "
             "client units (slowest → fastest) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r.times
        units = ",".join(map(str, r.splits)) if len(r.splits) <= 8 else ",".join(map(str, r.splits[:8])) + ",…"
        lines.append(f"| {r.model} | {r.mode} | {r.clients} | {t['SL']:.1f} | {t['TL-noPartition']:.1f} | "
                     f"{t['TL-syncOptimal']:.1f} | {t['TL']:.1f} | {r.ratio:.2f}x | [{units}] |")
    return lines


def plot_speedup(rows: Sequence[speedup.SpeedupRow], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, mode in zip(axes, ("horizontal", "vertical")):
        for model in speedup.MODELS:
            pts = [(r.clients, r.ratio) for r in rows if r.mode == mode and r.model == model]
            ax.plot(*zip(*pts), marker="o", label=model)
        ax.set(title=f"{mode}: SL / TL per-epoch simulated time", xlabel="clients C", yscale="log")
        ax.axhline(1.0, color="grey", lw=0.8)
    axes[0].set_ylabel("speed-up")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(runs: dict[str, list[dict[str, list[float]]]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, (mode, names) in zip(axes, (("horizontal", HORIZONTAL), ("vertical", VERTICAL))):
        for name in names:
            t = [statistics.mean(r["time"][i] for r in runs[name]) for i in range(len(runs[name][0]["time"]))]
            a = [statistics.mean(r["accuracy"][i] for r in runs[name]) for i in range(len(t))]
            ax.plot(t, a, marker=".", label=name)
        ax.set(title=f"{mode}: accuracy vs simulated time", xlabel="simulated seconds", xscale="log")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("test accuracy (mean of 3 seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_readme(sections: dict[str, list[str]]) -> None:
    text = README.read_text()
    for name, lines in sections.items():
        begin, end = f"<!-- reproduce:{name} -->", f"<!-- /reproduce:{name} -->"
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + "\n".join(lines) + "\n" + end + tail
    README.write_text(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 2 rounds, C in (1, 4): a smoke run")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the README and plots alone")
    parser.add_argument("--only", choices=("parity",), help="parity: only the horizontal SL/TL/client_sync table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    rounds, seeds = (2, SEEDS[:1]) if args.quick else (16, SEEDS)
    if args.only == "parity":
        parity = parity_section(rounds, seeds)
        print("\n".join(parity), f"({time.perf_counter() - start:.0f} s)", sep="\n")
        if not args.no_write:
            write_readme({"parity": parity})
            print(f"wrote {README}")
        return
    same, total = partitioner_check()
    print(f"partitioner: branch and bound == exhaustive on {same}/{total} instances", flush=True)
    rows = speedup.speedup_table(clients=(1, 4) if args.quick else (1, 2, 4, 6, 8, 12, 16, 20))
    slower = [r for r in rows
              if r.ratio <= 1 or r.times["TL"] > min(r.times["TL-noPartition"], r.times["TL-syncOptimal"])]
    print(f"speed-up: {len(rows)} configurations, TL faster than SL in {sum(r.ratio > 1 for r in rows)}, TL not the "
          f"fastest variant in {len(slower)} ({time.perf_counter() - start:.0f} s)", flush=True)
    acc_lines, runs = accuracy_section(rounds, seeds)
    print("\n".join(acc_lines), flush=True)
    parity = parity_section(rounds, seeds, runs)
    print("\n".join(parity), flush=True)
    res = speedup.resource_table()
    res_lines = ["| method | GFLOPs on clients / epoch | communication (MB) / epoch | learnable params on a client |",
                 "|---|---|---|---|"]
    res_lines += [f"| {k} | {v['gflops']:.1f} | {v['mb']:.1f} | {int(v['params']):,} |" for k, v in res.items()
                  if not k.startswith("_")]
    print("\n".join(res_lines))
    summary = [f"Branch and bound == exhaustive search on {same}/{total} seeded random instances. "
               f"Speed-up: SL / TL > 1 in {sum(r.ratio > 1 for r in rows)}/{len(rows)} configurations; full TL is the "
               f"fastest variant in {len(rows) - len(slower)}/{len(rows)}. Total run time "
               f"{time.perf_counter() - start:.0f} s on this CPU (one thread)."]
    if args.no_write:
        return
    plot_speedup(rows, README.parent / "speedup.png")
    plot_accuracy(runs, README.parent / "accuracy.png")
    write_readme({"summary": summary, "speedup": speedup_lines(rows), "accuracy": acc_lines, "parity": parity,
                  "resources": res_lines})
    print(f"wrote {README} and its plots")


if __name__ == "__main__":
    main()
