"""The FedVKD README's results block from three finished sweeps at spec 002's micro plan: one command.

    (from this plugin's folder: cd plugins/fedcore-fedvkd)
    nice -n 19 fedcore sweep repro/fedvkd_micro_sweep.toml --jobs 1 --out runs/fedvkd-micro
    nice -n 19 fedcore sweep repro/fedvkd_e3_sweep.toml --jobs 1 --out runs/fedvkd-e3
    nice -n 19 fedcore sweep repro/fedvkd_e5_sweep.toml --jobs 1 --out runs/fedvkd-e5
    python repro/tables.py runs/fedvkd-micro runs/fedvkd-e3 runs/fedvkd-e5 \\
        --write README.md

E1/E2 and the controls (the first sweep, non-IID p = 0.2): per row the best and the final round's server accuracy
across seeds (mean ± std), the paired difference to FedAvg(ViT), the edge models' best accuracy and bytes per
round (ledger); then the paired comparisons that the controls are for (shared init vs independent inits, the
frozen extractor vs both, FedVKD's edges vs FedAvg of the same edge). E3 (the second sweep, with the first's
p = 0.2): the final round's accuracy at p = 0.1 / 0.2 / 0.5 and the relative drop from IID (E3 and E5 evaluate
every 4th round to fit the CPU, so they compare round 20, which every sweep evaluates), each row's drop paired by
seed, the methods paired at each p and the per-seed relative drops of FedVKD against each other method. E5 (the
third, with the second's N = 400 cells): accuracy against the training-set size, the gap FedGKT - FedVKD paired
by seed at every N, and its change from N = 200 to 800 paired by seed. Writes between
``<!-- generated:fedvkd-results -->`` and ``<!-- /generated:fedvkd-results -->`` and the plot under
``results/fedvkd-results/`` next to the README.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
import sys

from fedcore.experiment import (
    Paired,
    RunRecord,
    SweepStatistics,
    emit,
    not_finished,
    paired,
    plots_dir,
    read_listing,
    script_command,
    spread,
    sweep_command,
    sweep_statistics,
    tables_parser,
)

TAG = "fedvkd-results"
NAMES = {"fedavg-vit": "FedAvg (ViT)", "fedvkd": "FedVKD (ViT), independent inits (paper)",
         "fedvkd-shared": "FedVKD, shared init (A18)", "fedvkd-frozen": "control: FedVKD, frozen shared extractor",
         "fedgkt": "FedGKT (CNN)", "fedgkt-shared": "FedGKT, shared init (A18)",
         "fedavg-edge": "FedAvg (edge ResNet-18)"}
PAPER_TABLE1 = {"fedvkd": 69.93, "fedavg-vit": 68.10, "fedgkt": 85.17}  # FedVKD Table 1, CIFAR-10 non-IID (%)
BASELINE = "fedavg-vit"
PAIRS = [("fedvkd-shared", "fedvkd"), ("fedvkd-frozen", "fedvkd-shared"), ("fedvkd-frozen", "fedvkd"),
         ("fedgkt", "fedvkd"), ("fedgkt", "fedvkd-shared"), ("fedgkt-shared", "fedgkt"),
         ("fedgkt-shared", "fedvkd-shared")]
E3_ROWS = ("fedvkd-shared", "fedgkt", "fedavg-vit")
E5_ROWS = ("fedvkd-shared", "fedgkt")


def best(run: RunRecord, key: str) -> float | None:
    values = [float(r[key]) for r in run.rows if isinstance(r.get(key), (int, float))]
    return max(values) if values else None


def per_seed(stats: SweepStatistics, label: str, key: str) -> dict[int, float]:
    """seed -> the best round's ``key`` of each finished cell of ``label``."""
    out = {}
    for run in stats.runs.get(label, []):
        v = best(run, key)
        if v is not None:
            out[int(run.config["seed"])] = v
    return out


def pct(values: Mapping[int, float]) -> str:
    if not values:
        return "—"
    s = spread([v * 100 for v in values.values()])
    return f"{s.mean:.1f}" if s.std is None else f"{s.mean:.1f} ± {s.std:.1f}"


def p_value(v: float | None) -> str:
    return "—" if v is None else f"{v:.2g}"


def versus(p: Paired | None) -> str:
    if p is None:
        return "—"
    return f"{p.mean_diff * 100:+.1f} (t p={p_value(p.t_p)}, W p={p_value(p.wilcoxon_p)})"


def bytes_per_round(runs: list[RunRecord]) -> str:
    each = [sum(r["bytes_up"] + r["bytes_down"] for r in run.rows) / len(run.rows) for run in runs]
    return "—" if not each else f"{sum(each) / len(each) / 1e6:.3f} MB"


def final(run: RunRecord, key: str) -> float | None:
    values = [float(r[key]) for r in run.rows if isinstance(r.get(key), (int, float))]
    return values[-1] if values else None


def per_seed_final(stats: SweepStatistics, label: str, key: str) -> dict[int, float]:
    out = {}
    for run in stats.runs.get(label, []):
        v = final(run, key)
        if v is not None:
            out[int(run.config["seed"])] = v
    return out


def main_block(stats: SweepStatistics) -> list[str]:
    labels = [s.label for s in stats.settings]
    acc = {label: per_seed(stats, label, "test_accuracy") for label in labels}
    last = {label: per_seed_final(stats, label, "test_accuracy") for label in labels}
    edge = {label: per_seed(stats, label, "edge_accuracy") for label in labels}
    lines = ["| row | paper C10 non-IID | server acc., best round | final round (20) | Δ best vs FedAvg(ViT) | "
             "edge acc., best round | bytes/round |", "|---|---|---|---|---|---|---|"]
    for v in labels:
        delta = "—" if v == BASELINE else versus(paired(acc[BASELINE], acc[v]))
        edge_acc = pct(acc[v]) + " (its model)" if v == "fedavg-edge" else pct(edge[v])
        lines.append(f"| {NAMES.get(v, v)} | {PAPER_TABLE1.get(v, '—')} | {pct(acc[v])} | {pct(last[v])} | {delta} "
                     f"| {edge_acc if v != BASELINE else '—'} | {bytes_per_round(stats.runs.get(v, []))} |")
    lines += ["", "| comparison (paired by seed, best round, points) | Δ |", "|---|---|"]
    for other, base in PAIRS:
        if acc.get(other) and acc.get(base):
            lines.append(f"| {NAMES[other]} − {NAMES[base]} | {versus(paired(acc[base], acc[other]))} |")
    if "fedavg-edge" in acc:
        for v in ("fedvkd", "fedvkd-shared", "fedgkt", "fedgkt-shared"):
            if edge.get(v):
                lines.append(f"| E2: {NAMES[v]}'s edge models − FedAvg (edge ResNet-18) | "
                             f"{versus(paired(acc['fedavg-edge'], edge[v]))} |")
    seeds = sorted({s for values in acc.values() for s in values})
    lines += ["", f"Best-round server accuracy per seed ({' / '.join(map(str, seeds))}), %: " + "; ".join(
        f"{NAMES.get(label, label)} " + " / ".join(f"{v * 100:.1f}" for _, v in sorted(acc[label].items()))
        for label in labels) + "."]
    missing = not_finished(stats)
    return lines + (["", missing] if missing else [])


def relative_drops(iid: Mapping[int, float], skewed: Mapping[int, float]) -> dict[int, float]:
    """seed -> (IID - skewed) / IID of that seed's two cells (the fraction of its IID accuracy it loses)."""
    return {s: (iid[s] - skewed[s]) / iid[s] for s in sorted(set(iid) & set(skewed)) if iid[s] > 0}


def per_seed_line(title: str, cells: Mapping[str, Mapping[int, float]]) -> str:
    """``title`` and every cell's per-seed values (%), in seed order."""
    seeds = sorted({s for values in cells.values() for s in values})
    return (f"{title} per seed ({' / '.join(map(str, seeds))}), %: " + "; ".join(
        f"{name} " + " / ".join(f"{v * 100:.1f}" for _, v in sorted(values.items()))
        for name, values in cells.items() if values) + ".")


def e3_block(main: SweepStatistics, e3: SweepStatistics) -> list[str]:
    parts = ("p=0.1", "p=0.2", "p=0.5")

    def acc(v: str, part: str) -> dict[int, float]:
        if part == "p=0.2":
            return per_seed_final(main, v, "test_accuracy")
        return per_seed_final(e3, f"{v} {part}", "test_accuracy")

    cells = {v: {part: acc(v, part) for part in parts} for v in E3_ROWS}
    lines = ["| row | IID (p = 0.1) | non-IID (p = 0.2) | stress (p = 0.5) | relative drop 0.1 → 0.2 | "
             "relative drop 0.1 → 0.5 |", "|---|---|---|---|---|---|"]
    for v in E3_ROWS:
        means = {part: spread(list(c.values())).mean if c else None for part, c in cells[v].items()}
        iid = means["p=0.1"]
        drops = ["—" if iid in (None, 0) or means[p] is None else f"{100 * (iid - means[p]) / iid:.1f} %"
                 for p in ("p=0.2", "p=0.5")]
        lines.append(f"| {NAMES[v]} | " + " | ".join(pct(cells[v][p]) for p in parts) + " | " + " | ".join(drops)
                     + " |")
    lines += ["", "| comparison (paired by seed, round 20) | Δ |", "|---|---|"]
    for v in E3_ROWS:
        for part in ("p=0.2", "p=0.5"):
            lines.append(f"| {NAMES[v]}: {part.replace('=', ' = ')} − IID (points) | "
                         f"{versus(paired(cells[v]['p=0.1'], cells[v][part]))} |")
    first, others = E3_ROWS[0], E3_ROWS[1:]
    for part in ("p=0.1", "p=0.5"):
        for v in others:
            lines.append(f"| at {part.replace('=', ' = ')}: {NAMES[first]} − {NAMES[v]} (points) | "
                         f"{versus(paired(cells[v][part], cells[first][part]))} |")
    for v in others:  # the E3 question: does FedVKD lose a smaller fraction of its IID accuracy?
        lines.append(f"| relative drop 0.1 → 0.5, {NAMES[first]} − {NAMES[v]} (per-seed drops, % of IID) | "
                     + versus(paired(relative_drops(cells[v]["p=0.1"], cells[v]["p=0.5"]),
                                     relative_drops(cells[first]["p=0.1"], cells[first]["p=0.5"]))) + " |")
    lines += ["", per_seed_line("Round-20 server accuracy at p = 0.1 and 0.5", {
        f"{NAMES[v]} at {part.replace('=', ' = ')}": cells[v][part] for v in E3_ROWS for part in ("p=0.1", "p=0.5")})]
    missing = not_finished(e3)
    return lines + (["", missing] if missing else [])


def e5_block(e3: SweepStatistics, e5: SweepStatistics) -> list[str]:
    sizes = ("n=200", "n=400", "n=800")

    def acc(v: str, size: str) -> dict[int, float]:
        label = f"{v} p=0.1" if size == "n=400" else f"{v} {size}"
        return per_seed_final(e3 if size == "n=400" else e5, label, "test_accuracy")

    def gap(size: str) -> dict[int, float]:
        vkd, gkt = acc("fedvkd-shared", size), acc("fedgkt", size)
        return {s: gkt[s] - vkd[s] for s in sorted(set(vkd) & set(gkt))}

    lines = ["| row | N = 200 | N = 400 | N = 800 | N = 800 − N = 200 (paired, points) |", "|---|---|---|---|---|"]
    for v in E5_ROWS:
        lines.append(f"| {NAMES[v]} | " + " | ".join(pct(acc(v, n)) for n in sizes) + " | "
                     + versus(paired(acc(v, "n=200"), acc(v, "n=800"))) + " |")
    lines.append("| gap FedGKT − FedVKD (shared init), paired | " + " | ".join(
        versus(paired(acc("fedvkd-shared", n), acc("fedgkt", n))) for n in sizes) + " | "
        + versus(paired(gap("n=200"), gap("n=800"))) + " |")
    lines += ["", per_seed_line("Round-20 server accuracy at N = 200 and 800", {
        f"{NAMES[v]} at N = {n[2:]}": acc(v, n) for v in E5_ROWS for n in ("n=200", "n=800")})]
    missing = not_finished(e5)
    return lines + (["", missing] if missing else [])


def plot(stats: SweepStatistics, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(1, 1, figsize=(7, 4))
    for s in stats.settings:
        runs = stats.runs.get(s.label, [])
        if not runs:
            continue
        acc = np.array([[r.get("test_accuracy", np.nan) for r in run.rows] for run in runs], dtype=float) * 100
        curve = acc.mean(axis=0)
        sd = acc.std(axis=0, ddof=1) if len(acc) > 1 else np.zeros_like(curve)
        x = range(1, len(curve) + 1)
        line, = ax.plot(x, curve, label=NAMES.get(s.label, s.label))
        ax.fill_between(x, curve - sd, curve + sd, color=line.get_color(), alpha=0.2)
    ax.set_title("server accuracy (FedAvg: the global model), synth non-IID p = 0.2")
    ax.set_xlabel("round")
    ax.set_ylabel("top-1 (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def seeds_of(sweep: Path) -> str:
    """``"N seeds"`` of a sweep's listing and what the paired tests can reach with them."""
    if not sweep.exists():
        return "not run"
    k = len(read_listing(sweep)["seeds"])
    return (f"{k} seeds; Δ = mean per-seed difference with the paired t and Wilcoxon tests (with {k} seeds the "
            f"smallest Wilcoxon p is {2 / 2 ** k:g})")


def results_block(sweep: Path, e3_sweep: Path, e5_sweep: Path, plots: Path, readme: Path | None,
                  argv: list[str]) -> str:
    stats = sweep_statistics(sweep, metric="test_accuracy", baseline=BASELINE)
    e3 = sweep_statistics(e3_sweep, metric="test_accuracy", baseline=BASELINE) if e3_sweep.exists() else None
    e5 = sweep_statistics(e5_sweep, metric="test_accuracy", baseline="fedgkt") if e5_sweep.exists() else None
    plot(stats, plots / "fedvkd_accuracy.png")
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    n = len(read_listing(sweep)["seeds"])
    done = [d for d in (sweep, e3_sweep, e5_sweep) if d.exists()]
    return "\n".join([
        "**Commands:** " + ", ".join(f"`{sweep_command(d)}`" for d in done) + f", then "
        f"`{script_command(__file__, argv)}` (every cell is a run directory; seeds "
        + ", ".join(f"{read_listing(d)['seeds']}" for d in done) + ").", "",
        "**E1/E2 and the controls: accuracy (%)**, non-IID (p = 0.2), mean ± std over seeds; server accuracy = mean "
        "over clients of server ∘ extractor_k (FedAvg rows: the global model); Δ = mean per-seed difference, in "
        f"points, with the paired t test and the Wilcoxon signed-rank test (two-sided; with {n} seeds the smallest "
        f"Wilcoxon p is {2 / 2 ** n:g}). Chance is 10 %.", "",
        *main_block(stats), "",
        "**E3: partition skew** (server accuracy after round 20, %, the round every sweep evaluates; relative drop = "
        f"100 (IID − p) / IID of the means; p = 0.2 is the sweep above, {n} seeds; p = 0.1 and 0.5: "
        f"{seeds_of(e3_sweep)}):", "",
        *(e3_block(stats, e3) if e3 is not None else [f"Not run ({e3_sweep} does not exist)."]), "",
        "**E5: training-set size** (IID, server accuracy after round 20, %; N = 400 are E3's p = 0.1 cells; "
        f"{seeds_of(e5_sweep)}):", "",
        *(e5_block(e3, e5) if e3 is not None and e5 is not None else [f"Not run ({e5_sweep} does not exist)."]),
        "",
        f"![server accuracy per round, mean ± std over seeds]({rel}/fedvkd_accuracy.png)", ""])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__, "the finished sweep of repro/fedvkd_micro_sweep.toml")
    parser.add_argument("e3_sweep", type=Path, help="the finished sweep of repro/fedvkd_e3_sweep.toml")
    parser.add_argument("e5_sweep", type=Path, help="the finished sweep of repro/fedvkd_e5_sweep.toml")
    args = parser.parse_args(argv)
    emit(results_block(args.sweep, args.e3_sweep, args.e5_sweep, plots_dir(args, TAG), args.write, argv),
         args.write, TAG)


if __name__ == "__main__":
    main()
