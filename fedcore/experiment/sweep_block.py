"""A plugin README's results block from a finished ``fedcore sweep``: one command, nothing typed by hand.

    cd plugins/fedcore-promptfl
    fedcore sweep repro/promptfl_sweep.toml --jobs 2 --out runs/promptfl-sweep
    python repro/tables.py runs/promptfl-sweep --metric test_accuracy --percent \\
        --pair promptfl:untrained --write README.md --tag promptfl-results

where the plugin's ``repro/tables.py`` is the two lines ``from fedcore.experiment import sweep_tables`` and
``raise SystemExit(sweep_tables(script=__file__))``.

For each ``--metric``: per setting across seeds, mean ± std, the 95% interval and the paired comparison with
its baseline (the sweep's, or ``--baseline``; a variant's name pairs per grid point), then the values per seed.
``--pair OTHER:BASE`` adds paired comparisons between any two settings, or two variants at every grid point.
The block starts with the command that made the sweep and this command, and links the sweep's plots, which
are written next to the README (``results/<tag>/``). Without ``--write`` it prints the block.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
import sys

from fedcore.experiment.readme_tables import commands_line, emit, not_finished, plots_dir, tables_parser
from fedcore.experiment.statistics import Paired
from fedcore.experiment.sweep_report import SweepStatistics, sweep_statistics, write_sweep_report


def _value(v: float | None, scale: float, digits: int) -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}"


def _p(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2g}" if v >= 1e-4 else f"{v:.1e}")


def _diff(p: Paired | None, scale: float, digits: int) -> list[str]:
    if p is None:
        return ["-", "-", "-"]
    return [f"{p.mean_diff * scale:+.{digits}f}", _p(p.t_p), _p(p.wilcoxon_p)]


def statistics_table(stats: SweepStatistics, scale: float, digits: int) -> list[str]:
    unit = " (%)" if scale == 100 else ""
    lines = [f"| setting | seeds | {stats.metric}{unit} mean ± std | 95% interval | Δ vs baseline | paired t p | "
             f"Wilcoxon p |", "|---|---:|---:|---:|---|---:|---:|"]
    for s in stats.settings:
        sp = s.spread
        mean = "-" if sp is None else _value(sp.mean, scale, digits) + (
            "" if sp.std is None else f" ± {_value(sp.std, scale, digits)}")
        interval = "-" if sp is None or sp.low is None else \
            f"[{_value(sp.low, scale, digits)}, {_value(sp.high, scale, digits)}]"
        if s.label == s.baseline:
            lines.append(f"| {s.label} | {len(s.values)} | {mean} | {interval} | (baseline) | | |")
        else:
            d, t, w = _diff(s.vs_baseline, scale, digits)
            lines.append(f"| {s.label} | {len(s.values)} | {mean} | {interval} | {d} vs {s.baseline} | {t} | {w} |")
    return lines


def pairs_for(stats: SweepStatistics, given: list[str]) -> list[tuple[str, str]]:
    """``OTHER:BASE`` -> (other label, base label) pairs: two labels, or two label parts (variants) swapped in
    every label that has OTHER."""
    labels = [s.label for s in stats.settings]
    out = []
    for text in given:
        other, sep, base = text.partition(":")
        if not sep:
            raise SystemExit(f"--pair {text!r}: expected OTHER:BASE")
        if other in labels and base in labels:
            out.append((other, base))
            continue
        found = [(lab, " ".join(base if part == other else part for part in lab.split(" ")))
                 for lab in labels if other in lab.split(" ")]
        found = [(a, b) for a, b in found if b in labels]
        if not found:
            raise SystemExit(f"--pair {text!r}: no settings match; settings: {', '.join(labels)}")
        out += found
    return out


def block(sweep: Path, metrics: list[str | None], pairs: list[str], baseline: str | None, scale: float,
          digits: int, plots: Path, readme: Path | None, argv: list[str], script: str | Path) -> str:
    out = [commands_line(script, argv, sweep), ""]
    for i, metric in enumerate(metrics):
        if i == 0:
            stats, _ = write_sweep_report(sweep, plots, metric=metric, baseline=baseline)
        else:
            stats = sweep_statistics(sweep, metric=metric, baseline=baseline)
        out += [f"Final `{stats.metric}`, mean ± std across seeds; Δ = mean per-seed difference to the baseline "
                "(paired t test and Wilcoxon signed-rank, two-sided):", "", *statistics_table(stats, scale, digits), ""]
        per_seed = "; ".join(f"{s.label} " + " / ".join(_value(v, scale, digits) for _, v in sorted(s.values.items()))
                             for s in stats.settings)
        out += [f"Per seed ({' / '.join(str(k) for k in sorted(stats.settings[0].values))}): {per_seed}.", ""]
        chosen = pairs_for(stats, pairs)
        if chosen:
            out += ["| comparison (paired by seed) | seeds | Δ mean | paired t p | Wilcoxon p |",
                    "|---|---:|---:|---:|---:|"]
            for other, base in chosen:
                p = stats.compare(other, base)
                out.append(f"| {other} − {base} | {0 if p is None else p.n} | " + " | ".join(_diff(p, scale, digits))
                           + " |")
            out.append("")
        missing = not_finished(stats)
        if missing:
            out += [missing, ""]
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    out += [f"![final metric per setting, mean and 95% interval]({rel}/sweep_final.png) "
            f"![metric over rounds, mean ± std]({rel}/sweep_accuracy_vs_round.png)", ""]
    return "\n".join(out)


def sweep_tables(argv: Sequence[str] | None = None, script: str | Path | None = None) -> int:
    """The results-block command (see the module): parse ``argv`` (default ``sys.argv[1:]``), print the block,
    write it into ``--write README`` under ``--tag``; ``script`` is the path the block's command line names."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__)
    parser.add_argument("--metric", action="append", default=[], help="a recorded metric (repeat for several)")
    parser.add_argument("--baseline", help="pair against this setting or variant instead of the sweep's baseline")
    parser.add_argument("--pair", action="append", default=[], metavar="OTHER:BASE",
                        help="an extra paired comparison: two settings, or two variants at every grid point")
    parser.add_argument("--percent", action="store_true", help="show fractions as percentages")
    parser.add_argument("--digits", type=int, help="decimals (default 4, or 1 with --percent)")
    parser.add_argument("--tag", help="the block's tag: <!-- generated:TAG --> ... <!-- /generated:TAG -->")
    args = parser.parse_args(argv)
    if args.write and not args.tag:
        parser.error("--write needs --tag")
    scale = 100.0 if args.percent else 1.0
    digits = args.digits if args.digits is not None else (1 if args.percent else 4)
    text = block(args.sweep, args.metric or [None], args.pair, args.baseline, scale, digits,
                 plots_dir(args, args.tag or "sweep"), args.write, argv, sys.argv[0] if script is None else script)
    emit(text, args.write, args.tag)
    return 0


__all__ = ["sweep_tables"]
