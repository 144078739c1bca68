"""Spec 003a A8's deterministic parts, scaled to a 2-core CPU: ``python repro/reproduce.py [--quick]``
from the plugin's folder (it finds the README from its own file, so any working directory does).

Writes the results between the ``<!-- reproduce:... -->`` markers of the plugin README and ``speedup.png``:

1. partitioner correctness: branch and bound == exhaustive search on 200 seeded random instances;
2. the simulated speed-up table (:mod:`fedcore_treelearning.speedup`), horizontal and vertical, C = 1..20;
3. the resource table (Tab. 3.2 analogue).

None of these trains a model: (1) is a correctness check over fixed instances and (2), (3) evaluate the cost
model on profiled networks, so they have no seed to sweep. The trained runs (accuracy parity, time to
accuracy, client sync, dropout) are a ``fedcore sweep``: ``repro/treelearning_parity_sweep.toml``, tabulated by
``repro/tables.py``.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import math
from pathlib import Path
import random
import time

import torch

from fedcore_treelearning import speedup
from fedcore_treelearning.cost import SplitProblem
from fedcore_treelearning.solver import branch_and_bound, exhaustive

README = Path(__file__).resolve().parents[1] / "README.md"


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
    parser.add_argument("--quick", action="store_true", help="C in (1, 4) only: a smoke run")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the README and the plot alone")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    same, total = partitioner_check()
    print(f"partitioner: branch and bound == exhaustive on {same}/{total} instances", flush=True)
    rows = speedup.speedup_table(clients=(1, 4) if args.quick else (1, 2, 4, 6, 8, 12, 16, 20))
    slower = [r for r in rows
              if r.ratio <= 1 or r.times["TL"] > min(r.times["TL-noPartition"], r.times["TL-syncOptimal"])]
    print(f"speed-up: {len(rows)} configurations, TL faster than SL in {sum(r.ratio > 1 for r in rows)}, TL not the "
          f"fastest variant in {len(slower)} ({time.perf_counter() - start:.0f} s)", flush=True)
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
    write_readme({"summary": summary, "speedup": speedup_lines(rows), "resources": res_lines})
    print(f"wrote {README} and its plot")


if __name__ == "__main__":
    main()
