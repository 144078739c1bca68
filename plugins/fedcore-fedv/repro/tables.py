"""The FedV README's results block, from a finished ``fedcore sweep`` of ``repro/fedv_sweep.toml``: one command.

    cd plugins/fedcore-fedv
    nice fedcore sweep repro/fedv_sweep.toml --jobs 2 --out runs/fedv-sweep
    python repro/tables.py runs/fedv-sweep --pair fedv:fedvz --pair fedv:fedavg-scratch/local \\
        --write README.md

Richer than :func:`fedcore.experiment.sweep_tables` in two ways the claims need. A FedAvg run records two scorings,
``test_accuracy`` (the global model) and ``local_model_accuracy`` (each client's model after its own local
update, the paper's scoring), so each FedAvg setting gives two rows, the second named ``SETTING/local``, and
any row can be paired with any other by seed (``--pair OTHER:BASE``); and the bytes per round the ledger
counted sit beside the accuracy. Per row: mean ± std across seeds, the 95% interval, the paired difference to
the sweep's baseline (paired t test and Wilcoxon signed-rank, two-sided), then the values per seed. The
sweep's plots go next to the README (``results/fedv-results/``).
"""
from __future__ import annotations

from pathlib import Path
import sys

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

TAG = "fedv-results"
LOCAL = "local_model_accuracy"
MIB = 2**20

PAPER = {"fedv": 96.87, "fedvz": 95.88, "fedavg-scratch/local": 82.02}
"""FedV Table 2, CIFAR-10 Dir(0.3), mean of 3 seeds, as printed (FedV/FedVZ on DeiT-S; FedAvg on ResNet-50-GN
from scratch, each client's local model scored)."""


def rows_of(acc: SweepStatistics, local: SweepStatistics | None) -> dict[str, dict[int, float]]:
    """Row name -> seed -> final accuracy: every setting, plus ``SETTING/local`` where the runs scored local
    models."""
    out: dict[str, dict[int, float]] = {}
    for s in acc.settings:
        if not s.values:  # no finished cell: listed as not finished below the table
            continue
        out[s.label] = dict(s.values)
        if local is not None and local.get(s.label).values:
            out[f"{s.label}/local"] = dict(local.get(s.label).values)
    return out


def baseline_of(acc: SweepStatistics, name: str) -> str:
    """The row a row is paired with in the table: its setting's baseline (a ``/local`` row: the same one)."""
    return acc.get(name.removesuffix("/local")).baseline


def bytes_per_round(acc: SweepStatistics, label: str) -> str:
    runs = acc.runs[label.removesuffix("/local")]
    if label.endswith("/local") or not runs:
        return ""
    up, down = (sum(r.rows[-1][key] / int(r.config["rounds"]) for r in runs) / len(runs) / MIB
                for key in ("bytes_up_total", "bytes_down_total"))
    return f"{up + down:.2f} ({up:.2f} / {down:.2f})"


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


def _diff(p: Paired | None) -> list[str]:
    return ["-", "-", "-"] if p is None else [f"{100 * p.mean_diff:+.1f}", _p(p.t_p), _p(p.wilcoxon_p)]


def table(acc: SweepStatistics, rows: dict[str, dict[int, float]]) -> list[str]:
    lines = [f"| setting | seeds | accuracy (%) mean ± std | 95% interval | Δ vs {acc.baseline} | paired t p | "
             f"Wilcoxon p | MiB/round (up / down) | paper |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, values in rows.items():
        sp = spread(list(values.values()))
        mean = f"{100 * sp.mean:.1f}" + ("" if sp.std is None else f" ± {100 * sp.std:.1f}")
        interval = "-" if sp.low is None or sp.high is None else f"[{100 * sp.low:.1f}, {100 * sp.high:.1f}]"
        base = baseline_of(acc, name)
        diff = ["(baseline)", "", ""] if name == base else _diff(paired(rows.get(base, {}), values))
        paper = f"{PAPER[name]:.2f}" if name in PAPER else ""
        lines.append(f"| {name} | {len(values)} | {mean} | {interval} | " + " | ".join(diff)
                     + f" | {bytes_per_round(acc, name)} | {paper} |")
    return lines


def block(sweep: Path, pairs: list[str], plots: Path, readme: Path | None, argv: list[str]) -> str:
    acc, _ = write_sweep_report(sweep, plots, metric="test_accuracy")
    has_local = any(LOCAL in row for runs in acc.runs.values() for run in runs for row in run.rows)
    local = sweep_statistics(sweep, metric=LOCAL) if has_local else None
    rows = rows_of(acc, local)
    seeds = sorted({seed for values in rows.values() for seed in values})
    out = [commands_line(__file__, argv, sweep), "",
           "Personalised test accuracy after the last round, sample-weighted over the clients' paired test splits "
           "(FedV/FedVZ/frozen: the global encoder with each client's own head and tail; SplitFed and FedAvg: the "
           "global model; `/local`: the same FedAvg runs scored with each client's model after its own local update, "
           "the paper's scoring). Δ = mean per-seed difference in points; MiB/round = what the ledger counted, mean "
           "over seeds. Paper: FedV Table 2, CIFAR-10 Dir(0.3).", "", *table(acc, rows), "",
           f"Per seed ({' / '.join(str(s) for s in seeds)}): "
           + "; ".join(f"{name} " + " / ".join(f"{100 * v[s]:.1f}" if s in v else "-" for s in seeds)
                       for name, v in rows.items()) + ".", ""]
    if pairs:
        out += ["| comparison (paired by seed) | seeds | Δ mean (points) | paired t p | Wilcoxon p |",
                "|---|---:|---:|---:|---:|"]
        for text in pairs:
            other, sep, base = text.partition(":")
            if not sep or other not in rows or base not in rows:
                raise SystemExit(f"--pair {text!r}: expected OTHER:BASE, each one of: {', '.join(rows)}")
            p = paired(rows[base], rows[other])
            out.append(f"| {other} − {base} | {0 if p is None else p.n} | " + " | ".join(_diff(p)) + " |")
        out.append("")
    missing = not_finished(acc)
    if missing:
        out += [missing, ""]
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    out += [f"![final accuracy per setting, mean and 95% interval]({rel}/sweep_final.png) "
            f"![accuracy over rounds, mean ± std]({rel}/sweep_accuracy_vs_round.png)", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__)
    parser.add_argument("--pair", action="append", default=[], metavar="OTHER:BASE",
                        help="a paired comparison between two rows (a setting, or SETTING/local)")
    args = parser.parse_args(argv)
    emit(block(args.sweep, args.pair, plots_dir(args, TAG), args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
