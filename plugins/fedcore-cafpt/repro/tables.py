"""The CaFPT README's results block, from a finished ``fedcore sweep repro/cafpt_sweep.toml``.

    cd plugins/fedcore-cafpt
    nice fedcore sweep repro/cafpt_sweep.toml --jobs 2 --out runs/cafpt-sweep
    python repro/tables.py runs/cafpt-sweep --write README.md

Per (rho, N), PromptFL's random N per class (``select=random``) against CaFPT's top-N by PVI (``select=pvi``)
from the same pools, paired by seed (a draw): final global test accuracy, mean ± std and worst draw; the mean
per-draw difference with the paired t statistic, its p-value and the Wilcoxon signed-rank p (two-sided); in how
many draws CaFPT scored higher; and the fraction of correctly labelled samples among each method's picks (from
each cell's ``cafpt/scores_client<c>.json``). Writes the block between ``<!-- generated:cafpt-results -->`` and
``<!-- /generated:cafpt-results -->`` and the plots under the README's ``results/cafpt-results/``.
"""
from __future__ import annotations

import json
from pathlib import Path
import sys

import numpy as np

import fedcore
from fedcore.experiment import (
    RunRecord,
    SweepStatistics,
    commands_line,
    emit,
    not_finished,
    plots_dir,
    read_listing,
    spread,
    tables_parser,
    write_sweep_report,
)

TAG = "cafpt-results"
METHODS = {"random": "PromptFL", "pvi": "CaFPT"}


def grid_points(stats: SweepStatistics) -> list[tuple[float, int]]:
    """(rho, N) of every setting labelled ``N<n> rho=<rho> select=<random|pvi>``, sorted."""
    points = set()
    for s in stats.settings:
        variant, rho, _ = s.label.split(" ")
        points.add((float(rho.removeprefix("rho=")), int(variant.removeprefix("N"))))
    return sorted(points)


def label(rho: float, shots: int, select: str) -> str:
    return f"N{shots} rho={rho} select={select}"


def clean_fraction(run: RunRecord, clean_labels: dict[str, np.ndarray]) -> float | None:
    """Correct labels among the samples a run selected (all clients), using the data set without the noise."""
    spec = dict(run.config["dataset"])
    key = json.dumps(spec, sort_keys=True)
    if key not in clean_labels:
        name = spec.pop("name")
        train, _ = fedcore.plugins.lookup(name, kind="dataset").obj(**spec)
        clean_labels[key] = train.y.numpy()
    seen, index = [], []
    for path in sorted((run.path / "cafpt").glob("scores_client*.json")):
        saved = json.loads(path.read_text())
        seen += [saved["label"][i] for i in saved["selected"]]
        index += [saved["index"][i] for i in saved["selected"]]
    if not index:
        return None
    return float(np.mean(np.asarray(seen) == clean_labels[key][index]))


def _ms(values: list[float]) -> str:
    s = spread([100 * v for v in values])
    return f"{s.mean:.1f}" + ("" if s.std is None else f" ± {s.std:.1f}")


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def table(stats: SweepStatistics) -> tuple[list[str], list[str], dict[tuple[float, int, str], list[float]]]:
    clean_labels: dict[str, np.ndarray] = {}
    lines = ["| ρ | N | draws | PromptFL acc. (%) | CaFPT acc. (%) | worst draw PromptFL / CaFPT | Δ (points) | "
             "paired t | t p | Wilcoxon p | CaFPT higher | correct labels picked PromptFL / CaFPT |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    per_draw, values = [], {}
    all_seeds = sorted({seed for s in stats.settings for seed in [*s.values, *s.missing]})
    for rho, shots in grid_points(stats):
        rnd, pvi = stats.get(label(rho, shots, "random")), stats.get(label(rho, shots, "pvi"))
        seeds = sorted(set(rnd.values) & set(pvi.values))
        if not seeds:
            continue
        a, b = [rnd.values[s] for s in seeds], [pvi.values[s] for s in seeds]
        values[(rho, shots, "random")], values[(rho, shots, "pvi")] = a, b
        pr = pvi.vs_baseline
        clean = []
        for s in (rnd, pvi):
            fr = [f for f in (clean_fraction(r, clean_labels) for r in stats.runs[s.label]) if f is not None]
            clean.append(f"{np.mean(fr):.2f}" if fr else "-")
        wins = sum(y > x for x, y in zip(a, b))
        t = "-" if pr is None or pr.t is None else f"{pr.t:.2f}"
        delta = "-" if pr is None else f"{100 * pr.mean_diff:+.1f}"
        worst = f"{100 * min(a):.1f} / {100 * min(b):.1f}"
        tests = f"{t} | {_p(pr.t_p if pr else None)} | {_p(pr.wilcoxon_p if pr else None)}"
        lines.append(f"| {rho} | {shots} | {len(seeds)} | {_ms(a)} | {_ms(b)} | {worst} | {delta} | {tests} | "
                     f"{wins} of {len(seeds)} | {clean[0]} / {clean[1]} |")
        which = "" if seeds == all_seeds else f" (seeds {', '.join(map(str, seeds))})"
        per_draw.append(f"ρ = {rho}, N = {shots}{which}: PromptFL " + " / ".join(f"{100 * v:.1f}" for v in a)
                        + "; CaFPT " + " / ".join(f"{100 * v:.1f}" for v in b))
    return lines, per_draw, values


def range_plot(values: dict[tuple[float, int, str], list[float]], out: Path) -> Path | None:
    """Mean and range over draws per N, one panel per rho (the thesis's Fig. 6.6 at micro scale)."""
    if not values:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rhos = sorted({r for r, _, _ in values})
    fig, axes = plt.subplots(1, len(rhos), figsize=(4.5 * len(rhos), 3.5), sharey=True, squeeze=False)
    for ax, rho in zip(axes[0], rhos):
        for select, colour, dx in (("random", "tab:blue", -0.06), ("pvi", "tab:red", 0.06)):
            shots = sorted(n for r, n, s in values if r == rho and s == select)
            vals = [100 * np.asarray(values[(rho, n, select)]) for n in shots]
            xs = np.log2(shots) + dx
            ax.plot(xs, [v.mean() for v in vals], marker="o", color=colour, label=METHODS[select])
            ax.vlines(xs, [v.min() for v in vals], [v.max() for v in vals], color=colour, alpha=0.5)
            ax.set_xticks(np.log2(shots), [str(n) for n in shots])
        ax.set_xlabel("shots per class N")
        ax.set_title(f"label noise rho = {rho}")
    axes[0][0].set_ylabel("test accuracy (%), mean and range over draws")
    axes[0][0].legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "cafpt_vs_random.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def results_block(sweep: Path, plots: Path, readme: Path | None, argv: list[str]) -> str:
    listing = read_listing(sweep)
    stats, _ = write_sweep_report(sweep, plots, metric="test_accuracy")
    lines, per_draw, values = table(stats)
    range_plot(values, plots)
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    missing = not_finished(stats)
    out = [commands_line(__file__, argv, sweep), "",
           "Final global test accuracy across draws (seeds); Δ = mean per-draw difference CaFPT − PromptFL, paired "
           "t test and Wilcoxon signed-rank test (two-sided; with 5 pairs the smallest Wilcoxon p is 0.0625):", "",
           *lines, "", "Per draw (seeds " + " / ".join(str(s) for s in listing["seeds"]) + "): "
           + "; ".join(per_draw) + ".", ""]
    if missing:
        out += [missing, ""]
    out += [f"![accuracy per N, mean and range over draws]({rel}/cafpt_vs_random.png) "
            f"![final accuracy per setting, mean and 95% interval]({rel}/sweep_final.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tables_parser(__doc__).parse_args(argv)
    emit(results_block(args.sweep, plots_dir(args, TAG), args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
