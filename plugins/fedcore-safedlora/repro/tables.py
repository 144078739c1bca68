"""The SA-FedLoRA README's results block, from a finished ``fedcore sweep`` of ``repro/safedlora_sweep.toml``.

    cd plugins/fedcore-safedlora
    nice fedcore sweep repro/safedlora_sweep.toml --jobs 2 --out runs/safedlora-sweep
    python repro/tables.py runs/safedlora-sweep --write README.md

Per setting across seeds: final and best test accuracy (mean ± std, paired t and Wilcoxon against FedFFT),
and the bytes the ledger counted (total, and to the first round >= 0.85, TC). Writes the markdown between
``<!-- generated:safedlora-results -->`` and ``<!-- /generated:safedlora-results -->`` in the README, and the
sweep's plots (``sweep_final.png``, ``sweep_accuracy_vs_round.png``) next to it under ``results/sweep/``.
"""
from __future__ import annotations

from pathlib import Path
import sys
from typing import Any

from fedcore.experiment import (
    Paired,
    commands_line,
    emit,
    not_finished,
    paired,
    plots_dir,
    spread,
    tables_parser,
    write_sweep_report,
)
from fedcore_safedlora.costs import MIB, cost_to_target

TARGET = 0.85


def _p(p: Paired | None, baseline: bool) -> str:
    if p is None:
        return "(baseline)" if baseline else "-"
    t = "-" if p.t_p is None else f"{p.t_p:.2g}"
    w = "-" if p.wilcoxon_p is None else f"{p.wilcoxon_p:.2g}"
    return f"{p.mean_diff:+.4f} (t p {t}, W p {w})"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    s = spread(values)
    return f"{s.mean:.4f}" + ("" if s.std is None else f" ± {s.std:.4f}")


def _bytes(histories: list[list[dict[str, Any]]]) -> tuple[str, str]:
    if not histories:
        return "-", "-"
    totals = {h[-1]["bytes_up_total"] + h[-1]["bytes_down_total"] for h in histories}
    total = " / ".join(f"{t / MIB:.2f}" for t in sorted(totals))  # one number: the ledger is seed-independent
    tc = [cost_to_target(h, TARGET) for h in histories]
    reached = [t for t in tc if t is not None]
    where = f" ({', '.join(f'{t / MIB:.2f}' for t in reached)})" if reached else ""
    return total, f"{len(reached)} of {len(tc)}{where}"


def results_block(sweep: Path, plots: Path, readme: Path | None, argv: list[str]) -> str:
    stats, _ = write_sweep_report(sweep, plots, baseline="fedfft", metric="test_accuracy")
    base = stats.get(stats.baseline)
    best_of = {s.label: {int(run.config["seed"]): max(r["test_accuracy"] for r in run.rows if "test_accuracy" in r)
                         for run in stats.runs[s.label]} for s in stats.settings}
    lines = [f"| setting | seeds | final acc. mean ± std | Δ final vs FedFFT | best acc. mean ± std | "
             f"Δ best vs FedFFT | total MiB | reached {TARGET} (TC MiB) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for s in stats.settings:
        histories = [list(run.rows) for run in stats.runs[s.label]]
        best = best_of[s.label]
        vs_best = None if s.label == base.label else paired(best_of[base.label], best)
        total, tc = _bytes(histories)
        lines.append(f"| {s.label} | {len(s.values)} | {_mean_std(list(s.values.values()))} | "
                     f"{_p(s.vs_baseline, s.label == base.label)} | {_mean_std(list(best.values()))} | "
                     f"{_p(vs_best, s.label == base.label)} | {total} | {tc} |")
    missing = not_finished(stats)
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    per_seed = "; ".join(f"{s.label} " + " / ".join(f"{v:.4f}" for _, v in sorted(s.values.items()))
                         for s in stats.settings)
    seeds = sorted({seed for s in stats.settings for seed in s.values})
    out = [commands_line(__file__, argv, sweep), "", *lines, "",
           f"Final accuracy per seed ({' / '.join(map(str, seeds))}): {per_seed}.",
           "Δ = mean per-seed difference to FedFFT; t p = paired t test, W p = Wilcoxon signed-rank (two-sided).", ""]
    if missing:
        out += [missing, ""]
    out += [f"![final accuracy, mean and 95% interval]({rel}/sweep_final.png) "
            f"![accuracy over rounds, mean ± std]({rel}/sweep_accuracy_vs_round.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__)
    parser.add_argument("--plots", type=Path, help="where the plots go (default: README's dir/results/sweep)")
    args = parser.parse_args(argv)
    emit(results_block(args.sweep, args.plots or plots_dir(args, "sweep"), args.write, argv), args.write,
         "safedlora-results")


if __name__ == "__main__":
    main()
