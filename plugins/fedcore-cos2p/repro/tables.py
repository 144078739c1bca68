"""The Co-S2P README's results block, from the finished sweeps of repro/cos2p_sweep.toml and, optionally, of
repro/cos2p_schedule_sweep.toml (the μ × T_clk grid); the commands run from this plugin's folder
(``cd plugins/fedcore-cos2p``).

    nice -n 19 fedcore sweep repro/cos2p_sweep.toml --jobs 1 --out runs/cos2p-sweep
    nice -n 19 fedcore sweep repro/cos2p_schedule_sweep.toml --jobs 1 --out runs/cos2p-schedule-sweep
    python repro/tables.py runs/cos2p-sweep runs/cos2p-schedule-sweep \\
        --write README.md

Everything is read from the cells' recorded history rows: ``test_accuracy`` and ``virtual_time`` per round, the
engine's ``ru`` (Eq. 17's per-round term; a run's RU is their mean, ``fedcore_cos2p.run_ru``) and ``utilisation``
(busy fraction so far), and the aggregator's ``agg_staleness_<τ>`` counts (``staleness_histogram``). Per setting
across seeds: mean ± std; against FedRolex (the main table) or Co-S2P (ablations) the mean per-seed difference
with a paired t test and Wilcoxon signed-rank (two-sided; with 3 seeds Wilcoxon cannot go below p = 0.25).
Writes the block between ``<!-- generated:cos2p-results -->`` and ``<!-- /generated:cos2p-results -->`` and the
plots under ``results/cos2p-results/``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
import sys
from typing import Any

from fedcore.experiment import (
    Paired,
    SweepStatistics,
    commands_line,
    emit,
    not_finished,
    paired,
    plots_dir,
    spread,
    sweep_statistics,
    tables_parser,
    write_sweep_report,
)
from fedcore_cos2p.metrics import run_ru, staleness_histogram

TAG = "cos2p-results"
BASELINE = "fedrolex"
MAIN = ("co-s2p", "fedrolex", "heterofl", "fedavg-full", "co-s2p-async")
ASYNC = "co-s2p-async"
ABLATIONS = ("co-s2p", "random-linear", "random-msa", "random-both", "no-self-distillation", "ratio-2", "ratio-half")
FEDAVG, BAND = "fedavg-full", (0.60, 0.80)  # spec 004 §6: FedAvg(Full) tuned into 60-80% first
Rows = list[dict[str, Any]]


def last(rows: Rows, key: str, until: float = float("inf")) -> float:
    """The last recorded ``key`` at or before virtual time ``until`` (0.0 when none)."""
    seen = [r[key] for r in rows if key in r and r.get("virtual_time", 0.0) <= until + 1e-12]
    return float(seen[-1]) if seen else 0.0


def per_seed(stats: SweepStatistics, label: str, of: Callable[[Rows], float]) -> dict[int, float]:
    return {int(run.config["seed"]): of(run.rows) for run in stats.runs.get(label, [])}


def mean_std(values: Mapping[int, float], digits: int = 3) -> str:
    if not values:
        return "-"
    s = spread(list(values.values()))
    return f"{s.mean:.{digits}f}" + ("" if s.std is None else f" ± {s.std:.{digits}f}")


def p_text(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2g}" if v >= 1e-4 else f"{v:.1e}")


def diff(p: Paired | None, digits: int = 3) -> str:
    if p is None:
        return "-"
    return f"{p.mean_diff:+.{digits}f} (t p {p_text(p.t_p)}, W p {p_text(p.wilcoxon_p)})"


def verdict(p: Paired | None) -> str:
    """What a paired difference supports at n seeds: higher, lower, or not distinguishable (two-sided t, 5%)."""
    if p is None or p.t_p is None:
        return "untested (no paired variation)"
    if p.t_p >= 0.05:
        return f"not distinguishable at n = {p.n} (paired t p = {p_text(p.t_p)})"
    return f"{'higher' if p.mean_diff > 0 else 'lower'} (paired t p = {p_text(p.t_p)}, n = {p.n})"


def budget_of(stats: SweepStatistics) -> float:
    """The equal virtual-time budget: the shortest run of the round-based main methods (the asynchronous
    variant's merges take one arrival each, so it may end earlier; it is marked instead of shrinking it)."""
    ends = [last(run.rows, "virtual_time") for label in MAIN if label != ASYNC for run in stats.runs.get(label, [])]
    return min(ends) if ends else float("inf")


def main_tables(stats: SweepStatistics, budget: float) -> list[str]:
    columns: dict[str, Callable[[Rows], float]] = {
        "RU (Eq. 17)": run_ru, "busy fraction": lambda rows: last(rows, "utilisation"),
        f"accuracy at {budget:.4g} s": lambda rows: last(rows, "test_accuracy", budget),
        "final accuracy": lambda rows: last(rows, "test_accuracy")}
    values = {name: {label: per_seed(stats, label, of) for label in MAIN} for name, of in columns.items()}
    out = [f"| method | seeds | {' | '.join(columns)} |", "|---|---:|" + "---:|" * len(columns)]
    for label in MAIN:
        short = label == ASYNC and any(last(run.rows, "virtual_time") < budget for run in stats.runs.get(label, []))
        cells = [mean_std(values[name][label]) for name in columns]
        name = label + (" (ends before the budget)" if short else "")
        out.append(f"| {name} | {len(values['final accuracy'][label])} | {' | '.join(cells)} |")
    out += ["", f"Paired by seed against {BASELINE} (Δ = mean per-seed difference; t p = paired t test, W p = Wilcoxon "
            "signed-rank; t p is '-' where the difference is the same at every seed, as the synchronous methods' "
            "RU is):", "",
            f"| method | {' | '.join('Δ ' + name for name in columns)} |", "|---|" + "---|" * len(columns)]
    for label in MAIN:
        if label != BASELINE:
            out.append(f"| {label} | " + " | ".join(diff(paired(values[name][BASELINE], values[name][label]))
                                                     for name in columns) + " |")
    return out


def ablation_table(stats: SweepStatistics) -> list[str]:
    final = {label: per_seed(stats, label, lambda rows: last(rows, "test_accuracy")) for label in ABLATIONS}
    ru = {label: per_seed(stats, label, run_ru) for label in ABLATIONS}
    out = ["| variant | seeds | final accuracy | Δ vs co-s2p | RU |", "|---|---:|---:|---|---:|"]
    for label in ABLATIONS:
        vs = "(reference)" if label == "co-s2p" else diff(paired(final["co-s2p"], final[label]))
        out.append(f"| {label} | {len(final[label])} | {mean_std(final[label])} | {vs} | {mean_std(ru[label])} |")
    return out


def grid_table(stats: SweepStatistics, schedule: SweepStatistics | None) -> list[str]:
    """Final accuracy, RU, virtual time and staleness per μ × T_clk point (the schedule sweep), and of the main
    sweep's Co-S2P and Co-S2P(Async.) for comparison (those at 6 rounds, 18 merges)."""
    t_clk = stats.runs["co-s2p"][0].config["pipeline"]["schedule"]["t_clk"] if stats.runs.get("co-s2p") else None
    out = ["| setting | rounds | seeds | final accuracy | RU | virtual time (s) | merged updates by staleness τ "
           "(seeds summed) |", "|---|---:|---:|---:|---:|---:|---|"]
    sources = [(schedule, s.label) for s in (schedule.settings if schedule else [])]
    for table, label in sources + [(stats, "co-s2p"), (stats, ASYNC)]:
        runs = table.runs.get(label, []) if table else []
        hist: dict[int, int] = {}
        for run in runs:
            for tau, count in staleness_histogram(run.rows).items():
                hist[tau] = hist.get(tau, 0) + count
        name = label
        if t_clk and runs and label.startswith("mu="):
            factor = runs[0].config["pipeline"]["schedule"]["t_clk"] / (t_clk / 0.25)
            name = f"μ = {runs[0].config['pipeline']['schedule']['mu']}, T_clk = {factor:.2g} × median round"
        rounds = runs[0].config["rounds"] if runs else "-"
        out.append(f"| {name} | {rounds} | {len(runs)} | "
                   f"{mean_std(per_seed(table, label, lambda rows: last(rows, 'test_accuracy')))} | "
                   f"{mean_std(per_seed(table, label, run_ru))} | "
                   f"{mean_std(per_seed(table, label, lambda rows: last(rows, 'virtual_time')), 4)} | "
                   + ", ".join(f"τ={k}: {v}" for k, v in sorted(hist.items())) + " |")
    return out


def claims(stats: SweepStatistics, budget: float) -> list[str]:
    ru = {label: per_seed(stats, label, run_ru) for label in ("co-s2p", BASELINE)}
    acc = {label: per_seed(stats, label, lambda rows: last(rows, "test_accuracy", budget))
           for label in ("co-s2p", BASELINE)}
    if not ru["co-s2p"] or not ru[BASELINE]:
        return ["(needs finished co-s2p and fedrolex cells)"]
    ratio = spread(list(ru["co-s2p"].values())).mean / spread(list(ru[BASELINE].values())).mean
    p_ru, p_acc = paired(ru[BASELINE], ru["co-s2p"]), paired(acc[BASELINE], acc["co-s2p"])
    band = per_seed(stats, FEDAVG, lambda rows: last(rows, "test_accuracy"))
    inside = bool(band) and all(BAND[0] <= v <= BAND[1] for v in band.values())
    where = ("yes, at every seed" if inside else "no: per seed " + ", ".join(f"{v:.3f}" for v in band.values())
             if band else "(no finished fedavg-full cell)")
    return ["| claim (vs FedRolex) | micro-scale number | supported? |", "|---|---|---|",
            f"| (set-up) FedAvg(Full) final accuracy in the spec's {BAND[0]:.0%}–{BAND[1]:.0%} band | "
            f"{mean_std(band)} | {where} |",
            f"| RU 1.1–1.2x over FedRolex | {ratio:.3f}x (Δ {diff(p_ru)}) | "
            f"{'yes' if ratio >= 1.1 and p_ru and p_ru.mean_diff > 0 else 'no (below 1.1x)'}: Co-S2P's RU is "
            f"{verdict(p_ru)} |",
            f"| higher server accuracy than FedRolex | Δ {diff(p_acc)} at {budget:.4g} virtual s | "
            f"{ {'higher': 'yes', 'lower': 'no'}.get(verdict(p_acc).split(' ')[0], 'not shown')}: Co-S2P's accuracy is "
            f"{verdict(p_acc)} |"]


def accuracy_vs_time(stats: SweepStatistics, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for i, label in enumerate(MAIN):
        for j, run in enumerate(stats.runs.get(label, [])):
            pts = [(r["virtual_time"], r["test_accuracy"]) for r in run.rows if "test_accuracy" in r]
            ax.plot(*zip(*pts), color=f"C{i}", marker=".", linewidth=1.2, alpha=0.8, label=label if j == 0 else None)
    ax.set_xlabel("simulated wall-clock (virtual s)")
    ax.set_ylabel("server test accuracy")
    ax.set_title("micro-E1, one line per seed")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def results_block(sweep: Path, schedule_sweep: Path | None, plots: Path, readme: Path | None, argv: list[str]) -> str:
    stats, _ = write_sweep_report(sweep, plots, metric="test_accuracy", baseline=BASELINE)
    schedule = sweep_statistics(schedule_sweep, metric="test_accuracy") if schedule_sweep else None
    accuracy_vs_time(stats, plots / "accuracy_vs_virtual_time.png")
    budget = budget_of(stats)
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    missing = not_finished(stats, schedule)
    sweeps = [sweep, schedule_sweep] if schedule_sweep else [sweep]
    out = [commands_line(__file__, argv, *sweeps), "",
           f"**R1 + R4: RU, busy fraction and server accuracy at an equal virtual-time budget ({budget:.4g} s, "
           f"the shortest synchronous run), mean ± std across seeds**", "", *main_tables(stats, budget), "",
           "**Claims of the paper at micro scale (accuracy and RU; the memory and time claims are in the cost "
           "table below)**", "", *claims(stats, budget), "",
           "**R5 (Tab. 3) and R7 (Tab. 8): ablations of Co-S2P, paired with Co-S2P by seed**", "",
           *ablation_table(stats), "",
           "**R6 (Fig. 6) and R8: μ × T_clk, and the staleness of the merged updates**", "",
           *grid_table(stats, schedule), ""]
    if missing:
        out += [missing, ""]
    out += [f"![server accuracy vs simulated wall-clock]({rel}/accuracy_vs_virtual_time.png) "
            f"![final accuracy per setting, mean and 95% interval]({rel}/sweep_final.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__, "the sweep of repro/cos2p_sweep.toml")
    parser.add_argument("schedule_sweep", type=Path, nargs="?", help="the sweep of repro/cos2p_schedule_sweep.toml")
    args = parser.parse_args(argv)
    emit(results_block(args.sweep, args.schedule_sweep, plots_dir(args, TAG), args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
