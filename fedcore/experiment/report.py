"""``fedcore report``: read run directories, print a summary table, write plots and a summary file.

Works on finished runs and on runs still going (``metrics.jsonl`` is read up to its last whole line).
"""
from __future__ import annotations

from collections.abc import Sequence
import csv
import json
import math
from pathlib import Path
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.experiment.plots import all_plots
from fedcore.experiment.progress import accuracy_key, human_bytes, human_seconds
from fedcore.experiment.rundir import CONFIG, METRICS, RunDir, is_run_dir


@attrs.frozen(kw_only=True)
class RunRecord:
    path: Path
    label: str
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    status: dict[str, Any]

    @property
    def num_clients(self) -> int | None:
        n = self.config.get("num_clients")
        return int(n) if isinstance(n, int) else None


def load_run(path: str | Path) -> RunRecord:
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"report: {path} is not a directory")
    if not is_run_dir(path) or not (path / METRICS).exists():
        raise ConfigError(f"report: {path} is not a fedcore run directory (no {METRICS})")
    rd = RunDir(path)
    try:
        config = rd.config() if (path / CONFIG).is_file() else {}
    except ValueError:
        config = {}
    return RunRecord(path=path, label=str(config.get("name") or path.name), rows=rd.rows(), config=config,
                     status=rd.status())


def load_runs(paths: Sequence[str | Path]) -> list[RunRecord]:
    runs = [load_run(p) for p in paths]
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):  # same config name twice: tell them apart by directory
        runs = [attrs.evolve(r, label=f"{r.label} ({r.path.name})") if labels.count(r.label) > 1 else r for r in runs]
    return runs


def pick_metric(runs: Sequence[RunRecord], metric: str | None) -> str | None:
    if metric is not None:
        if not any(metric in row for run in runs for row in run.rows):
            keys = sorted({k for run in runs for row in run.rows for k, v in row.items()
                           if isinstance(v, (int, float))})
            raise ConfigError(f"report: no run recorded {metric!r}; numeric keys: {', '.join(keys)}")
        return metric
    for run in runs:
        for row in reversed(run.rows):
            key = accuracy_key(row)
            if key:
                return key
    return None


def _last(rows: Sequence[dict[str, Any]], key: str) -> Any:
    return next((r[key] for r in reversed(rows) if key in r), None)


def summarize(run: RunRecord, metric: str | None) -> dict[str, Any]:
    rows = run.rows
    out: dict[str, Any] = {"run": run.label, "dir": str(run.path), "state": run.status.get("state", "?"),
                           "rounds": len(rows)}
    if metric:
        values = [(r[metric], r.get("round", i)) for i, r in enumerate(rows)
                  if isinstance(r.get(metric), (int, float)) and not math.isnan(r[metric])]
        out[f"final_{metric}"] = values[-1][0] if values else None
        if values:
            best, at = max(values, key=lambda v: v[0])
            out[f"best_{metric}"], out["best_round"] = best, at + 1
    out["bytes_up"] = _last(rows, "bytes_up_total") or 0
    out["bytes_down"] = _last(rows, "bytes_down_total") or 0
    out["wall_s"] = _last(rows, "wall_s")
    out["virtual_time"] = _last(rows, "virtual_time")
    counts = [len(r.get("clients", [])) for r in rows]
    out["clients_per_round"] = sum(counts) / len(counts) if counts else None
    for key in sorted({k for r in rows for k in r if k.endswith("_epsilon")}):  # privacy spent (fedcore-dp)
        out[key] = _last(rows, key)
        out[key[: -len("epsilon")] + "delta"] = _last(rows, key[: -len("epsilon")] + "delta")
    if run.status.get("stopped"):
        out["stopped"] = run.status["stopped"]
    return out


def _privacy(summary: dict[str, Any]) -> str:
    """``ε (δ)`` of every ``*_epsilon`` a run recorded, e.g. ``4.73 (δ=1e-05)``; ``-`` when none."""
    parts = [f"{summary[k]:.3g} (δ={summary.get(k[: -len('epsilon')] + 'delta')})" for k in summary
             if k.endswith("_epsilon") and isinstance(summary[k], (int, float))]
    return ", ".join(parts) or "-"


def print_table(summaries: Sequence[dict[str, Any]], metric: str | None, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:  # a pipe or CI log: do not squeeze the table into 80 columns
            console = Console(highlight=False, width=160)
    virtual = any(s["virtual_time"] is not None for s in summaries)
    table = Table(title=f"fedcore runs (accuracy = {metric})" if metric else "fedcore runs")
    cols = ["run", "state", "rounds"] + (["final acc", "best acc", "at round"] if metric else [])
    private = any(k.endswith("_epsilon") for s in summaries for k in s)
    cols += ["clients/round", "MB up", "MB down", "wall time"] + (["virtual time"] if virtual else [])
    cols += ["ε (δ)"] if private else []
    for c in cols:
        table.add_column(c, justify="left" if c in ("run", "state") else "right", no_wrap=c != "run")

    def num(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for s in summaries:
        cells = [s["run"], s["state"], str(s["rounds"])]
        if metric:
            cells += [num(s.get(f"final_{metric}"), ".4f"), num(s.get(f"best_{metric}"), ".4f"),
                      num(s.get("best_round"), "d")]
        cells += [num(s["clients_per_round"], ".1f"), f"{s['bytes_up'] / 1e6:.2f}", f"{s['bytes_down'] / 1e6:.2f}",
                  "-" if s["wall_s"] is None else human_seconds(s["wall_s"])]
        if virtual:
            cells.append("-" if s["virtual_time"] is None else human_seconds(s["virtual_time"]))
        if private:
            cells.append(_privacy(s))
        table.add_row(*cells)
    console.print(table)


def default_report_dir(runs: Sequence[RunRecord]) -> Path:
    if len(runs) == 1:
        return runs[0].path / "report"
    return Path("runs") / ("report-" + "-vs-".join(r.path.name for r in runs))[:120]


def write_report(runs: Sequence[RunRecord], out: str | Path | None = None, metric: str | None = None
                 ) -> tuple[Path, list[Path], list[dict[str, Any]], str | None]:
    """Plots plus ``summary.csv``/``summary.json`` in ``out``; returns (dir, files, summaries, metric)."""
    if not runs:
        raise ConfigError("report: give at least one run directory")
    metric = pick_metric(runs, metric)
    summaries = [summarize(r, metric) for r in runs]
    out = Path(out) if out is not None else default_report_dir(runs)
    files = all_plots(runs, metric, out)
    with open(out / "summary.csv", "w", newline="") as f:
        fields = list(dict.fromkeys(k for s in summaries for k in s))
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(summaries)
    (out / "summary.json").write_text(json.dumps(summaries, indent=2) + "\n")
    return out, files + [out / "summary.csv", out / "summary.json"], summaries, metric


__all__ = ["RunRecord", "human_bytes", "load_run", "load_runs", "print_table", "summarize", "write_report"]
