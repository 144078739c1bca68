"""PNG plots of one or several runs: accuracy against rounds, bytes and (virtual) time; client participation.

Each plot is one file with every run as one line, so runs compare at a glance. matplotlib runs
headless (Agg); nothing here reads files, it takes :class:`~fedcore.experiment.report.RunRecord` s.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedcore.experiment.report import RunRecord
    from fedcore.experiment.statistics import Spread

XOf = Callable[[Mapping[str, Any]], Any]
"""The x value of a history row (round, bytes, time), or None to skip the row."""


def _pyplot() -> Any:  # the matplotlib.pyplot module, Agg backend
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out as ``Figure.tight_layout`` does, write it, close it. The layout engine is run without being
    set on the figure: ``tight_layout`` leaves a placeholder engine behind, and for a figure with an engine
    ``savefig`` draws everything once more, with rendering off, before the real draw (a fifth of a report's plotting
    time). The file is the same byte for byte (tests/test_report.py checks it)."""
    from matplotlib.layout_engine import TightLayoutEngine

    # Figure.tight_layout's engine: pad 1.08 and rect None (the stubs say a tuple, but (0, 0, 1, 1) would add a
    # second layout pass and may move a subplot by a rounding error)
    TightLayoutEngine(rect=None).execute(fig)  # type: ignore[arg-type]
    fig.savefig(path)
    _pyplot().close(fig)
    return path


def _series(rows: Sequence[dict[str, Any]], x_of: XOf, metric: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        x, y = x_of(r), r.get(metric)
        if x is None or not isinstance(y, (int, float)):
            continue
        xs.append(float(x))
        ys.append(float(y))
    return xs, ys


def _line_plot(runs: Sequence[RunRecord], metric: str, x_of: XOf, xlabel: str, title: str, path: Path,
               *, log_x: bool = False) -> Path | None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=120)
    drawn = 0
    for run in runs:
        xs, ys = _series(run.rows, x_of, metric)
        if not xs:
            continue
        ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3.5, linewidth=1.8, label=run.label)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title)
    if log_x:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, frameon=True)
    return _save(fig, path)


def accuracy_vs_round(runs: Sequence[RunRecord], metric: str, out: Path) -> Path | None:
    return _line_plot(runs, metric, lambda r: r.get("round", -1) + 1, "round (aggregations done)",
                      f"{metric} vs round", out / "accuracy_vs_round.png")


def accuracy_vs_bytes(runs: Sequence[RunRecord], metric: str, out: Path) -> Path | None:
    def mb(r: Mapping[str, Any]) -> float | None:
        if "bytes_up_total" not in r:
            return None
        return (r["bytes_up_total"] + r.get("bytes_down_total", 0)) / 1e6

    return _line_plot(runs, metric, mb, "MB communicated (up + down, cumulative)",
                      f"{metric} vs communication", out / "accuracy_vs_bytes.png")


def accuracy_vs_time(runs: Sequence[RunRecord], metric: str, out: Path) -> Path | None:
    """Virtual time when every run has it (simulated devices), wall-clock time otherwise."""
    virtual = all(any("virtual_time" in r for r in run.rows) for run in runs)
    key, label = (("virtual_time", "virtual time (s, simulated devices)") if virtual
                  else ("wall_s", "wall-clock time (s)"))
    return _line_plot(runs, metric, lambda r: r.get(key), label, f"{metric} vs {'virtual' if virtual else 'wall'} time",
                      out / "accuracy_vs_time.png")


def participation(runs: Sequence[RunRecord], out: Path) -> Path | None:
    """Per run: which clients were aggregated in which round (left) and how often each was (right)."""
    import numpy as np

    plt = _pyplot()
    runs = [r for r in runs if any("clients" in row for row in r.rows)]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 2, figsize=(10.0, 1.2 + 2.4 * len(runs)), dpi=120, squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]})
    for (left, right), run in zip(axes, runs):
        n = run.num_clients or 1 + max((c for row in run.rows for c in row.get("clients", [])), default=0)
        grid = np.zeros((n, len(run.rows)))
        for j, row in enumerate(run.rows):
            for c in row.get("clients", []):
                if c < n:
                    grid[c, j] = 1.0
        left.imshow(grid, aspect="auto", interpolation="nearest", cmap="Blues", vmin=0, vmax=1.2, origin="lower",
                    extent=(0.5, len(run.rows) + 0.5, -0.5, n - 0.5))
        left.set_xlabel("round")
        left.set_ylabel("client")
        left.set_title(f"{run.label}: aggregated updates", fontsize=9)
        counts = grid.sum(axis=1)
        right.barh(np.arange(n), counts, color="tab:blue")
        right.set_xlabel("rounds aggregated")
        right.set_ylim(-0.5, n - 0.5)
        right.set_title(f"mean {counts.mean():.1f}, min {counts.min():.0f}, max {counts.max():.0f}", fontsize=9)
        right.grid(True, axis="x", alpha=0.3)
    return _save(fig, out / "participation.png")


def band_vs_round(groups: Mapping[str, Sequence[RunRecord]], metric: str, out: Path) -> Path | None:
    """Per setting of a sweep: the mean over seeds against rounds, with a band of ± one standard deviation."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=120)
    drawn = 0
    for label, runs in groups.items():
        curves = [dict(zip(*_series(r.rows, lambda row: row.get("round", -1) + 1, metric))) for r in runs]
        rounds = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if not rounds:
            continue
        values = np.array([[c[x] for x in rounds] for c in curves])
        mean, std = values.mean(axis=0), values.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros(len(rounds))
        line = ax.plot(rounds, mean, marker="o" if len(rounds) <= 30 else None, markersize=3.5, linewidth=1.8,
                       label=f"{label} (n={len(curves)})")[0]
        ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("round (aggregations done)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric} vs round: mean over seeds ± std")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, frameon=True)
    return _save(fig, out / "sweep_accuracy_vs_round.png")


def final_with_intervals(spreads: Sequence[tuple[str, Spread | None]], metric: str, out: Path) -> Path | None:
    """Per setting of a sweep: the final metric's mean with its 95% interval (t, over seeds)."""
    plt = _pyplot()
    shown = [(label, s) for label, s in spreads if s is not None]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(shown) + 2.0), 4.4), dpi=120)
    for i, (_, s) in enumerate(shown):
        err = None if s.low is None or s.high is None else [[s.mean - s.low], [s.high - s.mean]]
        ax.errorbar([i], [s.mean], yerr=err, fmt="o", capsize=6, markersize=7, linewidth=1.8, color="tab:blue")
    ax.set_xticks(range(len(shown)), [label for label, _ in shown], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"final {metric.replace('_', ' ')}")
    ax.set_title(f"final {metric}: mean and 95% interval over seeds")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, out / "sweep_final.png")


def all_plots(runs: Sequence[RunRecord], metric: str | None, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    made: list[Path | None] = []
    if metric is not None:
        made += [accuracy_vs_round(runs, metric, out), accuracy_vs_bytes(runs, metric, out),
                 accuracy_vs_time(runs, metric, out)]
    made.append(participation(runs, out))
    return [p for p in made if p is not None]
