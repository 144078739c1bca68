"""``fedcore report SWEEP_DIR``: per setting across seeds, mean ± std and 95% interval of the final metric,
paired comparisons against a baseline setting; a printed table, ``statistics.md|csv|json`` and plots.

Only finished cells count; unfinished or failed ones are listed as missing, so a report of a sweep still
going (or partly failed) says what it rests on.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.experiment.plots import band_vs_round, final_with_intervals
from fedcore.experiment.report import RunRecord, load_run, pick_metric
from fedcore.experiment.rundir import METRICS
from fedcore.experiment.statistics import Paired, Spread, paired, spread
from fedcore.experiment.sweep_spec import pair_baselines, read_listing

COLUMNS = ("setting", "n", "mean", "std", "ci95_low", "ci95_high", "baseline", "diff_vs_baseline", "t", "t_p",
           "wilcoxon_p", "values")


@attrs.frozen(kw_only=True)
class SettingStats:
    label: str
    baseline: str
    """The setting this one is paired with (itself for a baseline)."""
    values: dict[int, float]
    """seed -> final metric of the finished cells."""
    spread: Spread | None
    vs_baseline: Paired | None
    missing: list[int]
    """Seeds whose cell is not finished (or recorded no metric)."""

    def row(self) -> dict[str, Any]:
        s, p = self.spread, self.vs_baseline
        return {"setting": self.label, "n": s.n if s else 0, "mean": s.mean if s else None,
                "std": s.std if s else None, "ci95_low": s.low if s else None, "ci95_high": s.high if s else None,
                "baseline": self.baseline, "diff_vs_baseline": p.mean_diff if p else None, "t": p.t if p else None,
                "t_p": p.t_p if p else None, "wilcoxon_p": p.wilcoxon_p if p else None,
                "values": {str(k): v for k, v in sorted(self.values.items())}}


@attrs.frozen(kw_only=True)
class SweepStatistics:
    """The statistics table of one sweep: one :class:`SettingStats` per setting, in grid order."""

    directory: Path
    metric: str
    baseline: str
    """The baseline as given: a setting's label, or parts of labels (a variant's name) paired per grid point."""
    settings: list[SettingStats]
    runs: dict[str, list[RunRecord]] = attrs.field(repr=False)

    def rows(self) -> list[dict[str, Any]]:
        return [s.row() for s in self.settings]

    def get(self, label: str) -> SettingStats:
        for s in self.settings:
            if s.label == label:
                return s
        raise KeyError(f"no setting {label!r}; settings: {', '.join(s.label for s in self.settings)}")

    def compare(self, other: str, base: str) -> Paired | None:
        """``other - base`` paired by seed, for any two settings (the table pairs each with its own baseline)."""
        return paired(self.get(base).values, self.get(other).values)

    def markdown(self) -> str:
        head = (f"| setting | seeds | {self.metric} mean ± std | 95% interval | Δ vs {self.baseline} | "
                f"paired t p | Wilcoxon p |")
        lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
        for s in self.settings:
            cells = _cells(s)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def print(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.table import Table

        if console is None:
            console = Console(highlight=False)
            if not console.is_terminal:
                console = Console(highlight=False, width=160)
        table = Table(title=f"sweep {self.directory.name}: final {self.metric} across seeds")
        for col in ("setting", "seeds", "mean ± std", "95% interval", f"Δ vs {self.baseline}", "paired t p",
                    "Wilcoxon p"):
            table.add_column(col, justify="left" if col == "setting" else "right")
        for s in self.settings:
            table.add_row(*_cells(s))
        console.print(table)
        missing = [f"{s.label} seed {seed}" for s in self.settings for seed in s.missing]
        if missing:
            console.print(f"not finished (left out): {', '.join(missing)}", markup=False)

    def write(self, out: Path) -> list[Path]:
        """``statistics.md``, ``.csv``, ``.json`` and the plots in ``out``; returns the files written."""
        out.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        (out / "statistics.md").write_text(self.markdown())
        with open(out / "statistics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
            writer.writeheader()
            writer.writerows({**r, "values": " ".join(f"{k}:{v}" for k, v in r["values"].items())} for r in rows)
        (out / "statistics.json").write_text(json.dumps({"metric": self.metric, "baseline": self.baseline,
                                                         "settings": rows}, indent=2) + "\n")
        files = [out / "statistics.md", out / "statistics.csv", out / "statistics.json"]
        for made in (band_vs_round(self.runs, self.metric, out),
                     final_with_intervals([(s.label, s.spread) for s in self.settings], self.metric, out)):
            if made is not None:
                files.append(made)
        return files


def _num(v: float | None, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def _p(v: float | None) -> str:
    return "-" if v is None else (f"{v:.3g}" if v >= 1e-4 else f"{v:.1e}")


def _cells(s: SettingStats) -> list[str]:
    sp, pr = s.spread, s.vs_baseline
    mean = "-" if sp is None else (_num(sp.mean) + ("" if sp.std is None else f" ± {_num(sp.std)}"))
    interval = "-" if sp is None or sp.low is None else f"[{_num(sp.low)}, {_num(sp.high)}]"
    if s.label == s.baseline:
        return [s.label, str(len(s.values)), mean, interval, "(baseline)", "", ""]
    diff = "-" if pr is None else f"{pr.mean_diff:+.4f}"
    return [s.label, str(len(s.values)), mean, interval, diff, _p(pr.t_p if pr else None),
            _p(pr.wilcoxon_p if pr else None)]


def _final(run: RunRecord, metric: str) -> float | None:
    for row in reversed(run.rows):
        v = row.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def sweep_statistics(directory: str | Path, *, metric: str | None = None, baseline: str | None = None
                     ) -> SweepStatistics:
    """Read a sweep directory (finished cells only) into its statistics table."""
    directory = Path(directory)
    listing = read_listing(directory)
    labels = [s["label"] for s in listing["settings"]]
    parts = [(s["label"], [tuple(p) for p in s.get("parts") or [(f"part{i}", t) for i, t in enumerate(
        s["label"].split(" "))]]) for s in listing["settings"]]
    given = baseline if baseline is not None else listing["baseline"]
    base_of = pair_baselines(given, parts) if baseline is not None or "baselines" not in listing else \
        dict(listing["baselines"])
    runs: dict[str, list[RunRecord]] = {label: [] for label in labels}
    seeds_of: dict[str, list[int]] = {label: [] for label in labels}
    missing: dict[str, list[int]] = {label: [] for label in labels}
    for cell in listing["cells"]:
        path = directory / cell["dir"]
        run = load_run(path) if (path / METRICS).is_file() else None
        if run is not None and run.status.get("state") == "finished":
            runs[cell["setting"]].append(run)
            seeds_of[cell["setting"]].append(int(cell["seed"]))
        else:
            missing[cell["setting"]].append(int(cell["seed"]))
    every = [r for rs in runs.values() for r in rs]
    if not every:
        raise ConfigError(f"report: sweep {directory} has no finished cell yet")
    chosen = pick_metric(every, metric or listing.get("metric"))
    if chosen is None:
        raise ConfigError(f"report: the runs of sweep {directory} record no accuracy; name one with --metric")
    values: dict[str, dict[int, float]] = {}
    for label in labels:
        values[label] = {}
        for seed, run in zip(seeds_of[label], runs[label]):
            v = _final(run, chosen)
            if v is None:
                missing[label].append(seed)
            else:
                values[label][seed] = v
    settings = [SettingStats(label=label, baseline=base_of[label], values=values[label],
                             spread=spread(list(values[label].values())) if values[label] else None,
                             vs_baseline=None if label == base_of[label] else paired(values[base_of[label]],
                                                                                     values[label]),
                             missing=sorted(missing[label])) for label in labels]
    return SweepStatistics(directory=directory, metric=chosen, baseline=given, settings=settings, runs=runs)


def write_sweep_report(directory: str | Path, out: str | Path | None = None, *, metric: str | None = None,
                       baseline: str | None = None) -> tuple[SweepStatistics, list[Path]]:
    """The statistics of a sweep, written to ``out`` (default ``SWEEP_DIR/report``)."""
    stats = sweep_statistics(directory, metric=metric, baseline=baseline)
    where = Path(out) if out is not None else Path(directory) / "report"
    return stats, stats.write(where)


__all__ = ["SettingStats", "SweepStatistics", "sweep_statistics", "write_sweep_report"]
