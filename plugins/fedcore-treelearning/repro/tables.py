"""The Tree Learning README's accuracy block, from a finished ``fedcore sweep`` of
``repro/treelearning_parity_sweep.toml`` (the commands run from the plugin's folder).

    cd plugins/fedcore-treelearning
    nice fedcore sweep repro/treelearning_parity_sweep.toml --jobs 2 \\
        --out runs/treelearning-parity
    python repro/tables.py runs/treelearning-parity \\
        --write README.md

Per setting across seeds: final test accuracy (mean ± std; paired t and Wilcoxon against the SL setting of the
same mode), simulated seconds per epoch, and the simulated time to 95 % of that SL setting's mean final accuracy
(spec A9.10; the time is the cumulative ``agg_tl_sim_s`` of the history, paired t against SL where every seed
reached it). Writes the block between ``<!-- generated:treelearning-parity -->`` and its end marker, and the plots
(the sweep's two, and accuracy against simulated time) under ``results/treelearning-parity/`` next to the README;
``fedcore report``'s files stay in ``SWEEP_DIR/report/``.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
import shutil
import sys

from fedcore.experiment import (
    Paired,
    RunRecord,
    SweepStatistics,
    commands_line,
    emit,
    not_finished,
    paired,
    plots_dir,
    spread,
    tables_parser,
    write_sweep_report,
)

TAG = "treelearning-parity"
TARGET = 0.95  # of the SL setting's mean final accuracy
BASES = {"horizontal": "sl", "vertical": "vsl"}
PAIRS = (("tl-fedavg-common", "tl"), ("tl-dropout", "tl"), ("vtl-dropout", "vtl"))  # beyond each one vs SL


def mode_of(run: RunRecord) -> str:
    return str(run.config["pipeline"]["split"]["mode"])


def describe(run: RunRecord) -> str:
    """The recipe and what the setting changes in it, from the run's resolved config."""
    cohort = run.config["pipeline"]["cohort"]
    text = f"`{run.config['recipe']}`"
    if cohort.get("client_sync", "none") != "none":
        text += f", client_sync = `{cohort['client_sync']}`"
    if cohort.get("dropout_fraction", 0) > 0:
        text += f", dropout {cohort['dropout_fraction']:g} in round {cohort['dropout_round']}"
    return text


def curve(run: RunRecord) -> tuple[list[float], list[float]]:
    """(cumulative simulated seconds, test accuracy) after each round."""
    times, accuracy, clock = [], [], 0.0
    for row in run.rows:
        if "agg_tl_sim_s" in row:
            clock += float(row["agg_tl_sim_s"])
            if "test_accuracy" in row:
                times.append(clock)
                accuracy.append(float(row["test_accuracy"]))
    return times, accuracy


def time_to(run: RunRecord, target: float) -> float | None:
    times, accuracy = curve(run)
    return next((t for t, a in zip(times, accuracy) if a >= target), None)


def by_seed(runs: Sequence[RunRecord]) -> dict[int, RunRecord]:
    return {int(run.config["seed"]): run for run in runs}


def _mean_std(values: Sequence[float], digits: int = 3) -> str:
    s = spread(values)
    return f"{s.mean:.{digits}f}" + ("" if s.std is None else f" ± {s.std:.{digits}f}")


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


def _vs(p: Paired | None, digits: int, diffs: Sequence[float] = ()) -> str:
    """The mean difference, ± the std of the per-seed differences when given, and both tests' p."""
    if p is None:
        return "-"
    sd = spread(diffs).std if len(diffs) > 1 else None
    return (f"{p.mean_diff:+.{digits}f}" + ("" if sd is None else f" ± {sd:.{digits}f}")
            + f" (t p {_p(p.t_p)}, W p {_p(p.wilcoxon_p)})")


def _diffs(other: dict[int, float], base: dict[int, float]) -> list[float]:
    return [other[seed] - base[seed] for seed in sorted(set(other) & set(base))]


def table(stats: SweepStatistics) -> tuple[list[str], dict[str, float], list[str]]:
    """The markdown table, each mode's accuracy target, and the per-seed lines."""
    modes = {label: mode_of(runs[0]) for label, runs in stats.runs.items() if runs}
    targets = {mode: TARGET * spread(list(stats.get(base).values.values())).mean for mode, base in BASES.items()
               if stats.get(base).values}
    lines = ["| mode | setting | recipe | seeds | final accuracy | Δ vs SL (paired) | simulated s / epoch | "
             "time to 95 % of SL's final accuracy (s) | Δ time vs SL (paired) |",
             "|---|---|---|---:|---:|---|---:|---:|---|"]
    per_seed = []
    for s in stats.settings:
        runs = by_seed(stats.runs[s.label])
        if not runs:
            continue
        mode = modes[s.label]
        base = BASES[mode]
        reached = {seed: t for seed, run in runs.items() if (t := time_to(run, targets[mode])) is not None}
        base_reached = {seed: t for seed, run in by_seed(stats.runs[base]).items()
                        if (t := time_to(run, targets[mode])) is not None}
        epoch = [curve(run)[0][-1] / len(curve(run)[0]) for run in runs.values()]
        reach = _mean_std(list(reached.values())) if len(reached) == len(runs) else \
            f"reached in {len(reached)}/{len(runs)}"
        first = s.label == base
        vs = "—" if first else _vs(stats.compare(s.label, base), 3, _diffs(s.values, stats.get(base).values))
        vs_time = "—" if first else _vs(paired(base_reached, reached), 2, _diffs(reached, base_reached))
        lines.append(f"| {mode} | {s.label} | {describe(next(iter(runs.values())))} | {len(runs)} | "
                     f"{_mean_std(list(s.values.values()))} | {vs} | {_mean_std(epoch)} | {reach} | {vs_time} |")
        per_seed.append(f"{s.label} " + " / ".join(f"{v:.3f}" for _, v in sorted(s.values.items())) + " ("
                        + " / ".join("-" if seed not in reached else f"{reached[seed]:.1f} s" for seed in sorted(runs))
                        + ")")
    return lines, targets, per_seed


def plot_vs_time(stats: SweepStatistics, targets: dict[str, float], path: Path) -> Path:
    """Per mode: accuracy against cumulative simulated time, mean over seeds ± std, the 95 % target dashed."""
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, mode in zip(axes, BASES):
        for s in stats.settings:
            runs = stats.runs[s.label]
            if not runs or mode_of(runs[0]) != mode:
                continue
            curves = [curve(run) for run in runs]
            n = min(len(t) for t, _ in curves)
            t = np.array([c[0][:n] for c in curves]).mean(axis=0)
            a = np.array([c[1][:n] for c in curves])
            mean, std = a.mean(axis=0), a.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(n)
            line = ax.plot(t, mean, marker=".", label=f"{s.label} (n={len(runs)})")[0]
            ax.fill_between(t, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        if mode in targets:
            ax.axhline(targets[mode], color="grey", lw=0.8, ls="--")
        ax.set(title=f"{mode}: accuracy vs simulated time", xlabel="simulated seconds", xscale="log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8)
    axes[0].set_ylabel("test accuracy (mean ± std over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def results_block(sweep: Path, plots: Path, readme: Path | None, argv: list[str]) -> str:
    stats, written = write_sweep_report(sweep, metric="test_accuracy", baseline="sl")  # into SWEEP_DIR/report
    for path in written:
        if path.suffix == ".png":
            shutil.copyfile(path, plots / path.name)
    lines, targets, per_seed = table(stats)
    plot_vs_time(stats, targets, plots / "accuracy_vs_sim_time.png")
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    out = [commands_line(__file__, argv, sweep), "",
           *lines, "",
           "Δ = mean per-seed difference (setting − SL of the same mode: `sl` horizontally, `vsl` vertically); "
           "t p = paired t test, W p = Wilcoxon signed-rank, both two-sided. Targets: "
           + ", ".join(f"{mode} {t:.3f}" for mode, t in targets.items()) + ".", "",
           f"Final accuracy per seed ({' / '.join(str(s) for s in sorted(stats.settings[0].values))}), and the "
           f"time to the target: {'; '.join(per_seed)}.", "",
           "| comparison (paired by seed) | final accuracy Δ | time to SL's 95 % target Δ (s) |", "|---|---|---|"]
    labels = {s.label for s in stats.settings if s.values}
    for other, base in PAIRS:
        if other in labels and base in labels:
            target = targets[mode_of(stats.runs[base][0])]
            times = [{seed: t for seed, run in by_seed(stats.runs[label]).items()
                      if (t := time_to(run, target)) is not None} for label in (other, base)]
            out.append(f"| {other} − {base} | "
                       f"{_vs(stats.compare(other, base), 3, _diffs(stats.get(other).values, stats.get(base).values))}"
                       f" | {_vs(paired(times[1], times[0]), 2, _diffs(times[0], times[1]))} |")
    out.append("")
    missing = not_finished(stats)
    if missing:
        out += [missing, ""]
    out += [f"![accuracy vs simulated time, mean ± std]({rel}/accuracy_vs_sim_time.png) "
            f"![final accuracy, mean and 95% interval]({rel}/sweep_final.png) "
            f"![accuracy over rounds, mean ± std]({rel}/sweep_accuracy_vs_round.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tables_parser(__doc__).parse_args(argv)
    plots = plots_dir(args, TAG)
    plots.mkdir(parents=True, exist_ok=True)
    emit(results_block(args.sweep, plots, args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
