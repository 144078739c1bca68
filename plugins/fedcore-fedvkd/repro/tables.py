"""The FedVKD README's results block from two finished sweeps, beside the paper's Table 1: one command.

    nice fedcore sweep plugins/fedcore-fedvkd/repro/fedvkd_sweep.toml --jobs 2 --out runs/fedvkd-sweep
    nice fedcore sweep plugins/fedcore-fedvkd/repro/fedvkd_async_sweep.toml --jobs 2 --out runs/fedvkd-async-sweep
    python plugins/fedcore-fedvkd/repro/tables.py runs/fedvkd-sweep runs/fedvkd-async-sweep \\
        --write plugins/fedcore-fedvkd/README.md

E1/E2/E4 (the first sweep): per method and partition, the best round's server accuracy across seeds (mean ± std;
the 6-round runs are still rising, so the best round is nearly always the last), the paired difference to
FedAvg(ViT) at the same partition (paired t, Wilcoxon), the edge models' best accuracy, bytes per round (ledger)
and the edge's forward MACs per round (analytic, from each setting's model and epochs). Then extra paired
comparisons (FedGKT vs FedAvg(CNN), each ablation vs FedVKD, FedVKD's edge models vs FedAvg(edge)).
E6 (the second): barrier vs asynchronous rounds, with messages per round and the staleness of the packets
(from each run's ledger in its last checkpoint). Writes between ``<!-- generated:fedvkd-results -->`` and
``<!-- /generated:fedvkd-results -->`` and the plot under ``results/fedvkd-results/`` next to the README.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
import sys
from typing import Any

from fedcore.experiment import (
    Paired,
    RunRecord,
    SweepStatistics,
    emit,
    not_finished,
    paired,
    plots_dir,
    read_listing,
    run_state,
    script_command,
    spread,
    sweep_command,
    sweep_statistics,
    tables_parser,
)
from fedcore_distill import (
    bytes_by_kind,
    edge_model,
    fedavg_cnn_model,
    fedavg_vit_model,
    forward_macs,
)

TAG = "fedvkd-results"
NAMES = {"fedvkd": "FedVKD (ViT)", "fedavg-vit": "FedAvg (ViT)", "fedgkt": "FedGKT (CNN)",
         "fedavg-cnn": "FedAvg (CNN)", "fedavg-edge": "FedAvg (edge ResNet-18)", "e4-beta0": "E4: FedVKD beta = 0",
         "e4-wdist0": "E4: FedVKD w_dist = 0", "e4-soft-kd": "E4: ViT + soft server KD"}
PAPER_TABLE1 = {"fedvkd": (75.88, 69.93), "fedavg-vit": (73.91, 68.10), "fedgkt": (91.96, 85.17),
                "fedavg-cnn": (92.74, 84.36)}  # FedVKD paper, Table 1: CIFAR-10 IID / non-IID top-1 (%)
PARTITIONS = {"p=0.1": "IID (p = 0.1)", "p=0.2": "non-IID (p = 0.2)"}
BASELINE = "fedavg-vit"
PAIRS = [("fedgkt", "fedavg-cnn"), ("e4-beta0", "fedvkd"), ("e4-wdist0", "fedvkd"), ("e4-soft-kd", "fedvkd")]
FEDAVG_MODELS = {"kd.fedavg-vit": fedavg_vit_model, "kd.fedavg-cnn": fedavg_cnn_model, "kd.edge": edge_model}


def best(run: RunRecord, key: str) -> float | None:
    values = [float(r[key]) for r in run.rows if isinstance(r.get(key), (int, float))]
    return max(values) if values else None


def per_seed(stats: SweepStatistics, label: str, key: str) -> dict[int, float]:
    """seed -> the best round's ``key`` of each finished cell of ``label``."""
    out = {}
    for run in stats.runs[label]:
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


def edge_macs_per_round(config: Mapping[str, Any]) -> float:
    """Forward MACs per sample of what runs on the edge x samples x passes (3 per trained epoch: forward +
    backward ~ 3 forwards; FedVKD/FedGKT add one extraction pass for the upload)."""
    model, data = dict(config["model"]), config["dataset"]
    name = model.pop("name")
    shape = (3, int(data["size"]), int(data["size"]))
    epochs = int(config["pipeline"]["local_update"]["epochs"])
    if name in FEDAVG_MODELS:
        per, passes = forward_macs(FEDAVG_MODELS[name](**model), shape), 3 * epochs
    else:  # kd.fedvkd / kd.fedgkt: the edge ResNet alone runs on the client
        edge = edge_model(**{k: model[k] for k in ("num_classes", "width", "stem", "cut", "arch")})
        per, passes = forward_macs(edge, shape), 3 * epochs + 1
    return float(per * passes * int(data["n"]))


def ledger_of(run: RunRecord) -> list[dict[str, Any]]:
    """The run's ledger rows (direction, kind, nbytes per message), from its newest verified checkpoint."""
    state = run_state(run.path)
    if state is None:
        raise SystemExit(f"{run.path}: no readable checkpoint, so no ledger")
    return list(state["ledger"])


def accuracy_block(stats: SweepStatistics) -> list[str]:
    labels = [s.label for s in stats.settings]
    variants = list(dict.fromkeys(label.split(" ")[0] for label in labels))
    acc = {label: per_seed(stats, label, "test_accuracy") for label in labels}
    edge = {label: per_seed(stats, label, "edge_accuracy") for label in labels}
    head = ("| method | paper C10 IID | paper C10 non-IID | " + " | ".join(f"synth {p}" for p in PARTITIONS.values())
            + " | " + " | ".join(f"Δ vs FedAvg(ViT), {p}" for p in PARTITIONS.values())
            + " | edge acc, non-IID | bytes/round | edge MACs/round |")
    lines = [head, "|---|---|---|" + "---|" * (2 * len(PARTITIONS)) + "---|---|---|"]
    for v in variants:
        paper = PAPER_TABLE1.get(v, (None, None))
        cells = [pct(acc[f"{v} {p}"]) for p in PARTITIONS]
        deltas = ["—" if v == BASELINE else versus(paired(acc[f"{BASELINE} {p}"], acc[f"{v} {p}"]))
                  for p in PARTITIONS]
        non_iid = f"{v} p=0.2"
        runs = stats.runs[non_iid]
        macs = f"{edge_macs_per_round(runs[0].config) / 1e9:.3f} G" if runs else "—"
        lines.append(f"| {NAMES.get(v, v)} | {paper[0] or '—'} | {paper[1] or '—'} | " + " | ".join(cells + deltas)
                     + f" | {pct(edge[non_iid])} | {bytes_per_round(runs)} | {macs} |")
    lines += ["", "| comparison (paired by seed, best round) | " + " | ".join(PARTITIONS.values()) + " |",
              "|---|" + "---|" * len(PARTITIONS)]
    for other, base in PAIRS:
        lines.append(f"| {NAMES[other]} − {NAMES[base]} | " + " | ".join(
            versus(paired(acc[f"{base} {p}"], acc[f"{other} {p}"])) for p in PARTITIONS) + " |")
    lines.append("| FedVKD's edge models − FedAvg (edge ResNet-18) (E2) | " + " | ".join(
        versus(paired(acc[f"fedavg-edge {p}"], edge[f"fedvkd {p}"])) for p in PARTITIONS) + " |")
    seeds = sorted({s for values in acc.values() for s in values})
    lines += ["", f"Best-round server accuracy per seed ({' / '.join(map(str, seeds))}), %: " + "; ".join(
        f"{NAMES.get(label.split(' ')[0], label)} {label.split(' ')[1]} "
        + " / ".join(f"{v * 100:.1f}" for _, v in sorted(acc[label].items())) for label in labels) + "."]
    failed = {label: sum(len(row.get("failed") or []) for run in stats.runs[label] for row in run.rows)
              for label in labels}
    if any(failed.values()):
        lines += ["", "Client-rounds that failed and were dropped (the round went on without them): " + "; ".join(
            f"{NAMES.get(label.split(' ')[0], label)} {label.split(' ')[1]} {n} of "
            f"{sum(len(run.rows) for run in stats.runs[label]) * run_clients(stats.runs[label])}"
            for label, n in failed.items() if n) + "."]
    missing = not_finished(stats)
    if missing:
        lines += ["", missing]
    return lines


def run_clients(runs: list[RunRecord]) -> int:
    return runs[0].num_clients or 0 if runs else 0


def async_block(stats: SweepStatistics) -> list[str]:
    acc = {s.label: per_seed(stats, s.label, "test_accuracy") for s in stats.settings}
    edge = {s.label: per_seed(stats, s.label, "edge_accuracy") for s in stats.settings}
    lines = ["| schedule | server acc. (best round) | Δ vs barrier | edge acc. | messages/round | bytes/round | "
             "rounds trained on a stale packet | max staleness per seed |", "|---|---|---|---|---|---|---|---|"]
    for s in stats.settings:
        runs = sorted(stats.runs[s.label], key=lambda r: int(r.config["seed"]))
        messages = [sum(1 for x in ledger_of(r) if x["nbytes"]) / len(r.rows) for r in runs]
        stale = sum(1 for r in runs for row in r.rows if row.get("max_staleness"))
        worst = " / ".join(f"{max((row.get('max_staleness') or 0) for row in r.rows):.0f}" for r in runs)
        delta = "—" if s.label == "barrier" else versus(paired(acc["barrier"], acc[s.label]))
        lines.append(f"| {s.label} | {pct(acc[s.label])} | {delta} | {pct(edge[s.label])} | "
                     f"{sum(messages) / max(1, len(messages)):.1f} | {bytes_per_round(runs)} | "
                     f"{stale} of {sum(len(r.rows) for r in runs)} | {worst} |")
    barrier = sorted(stats.runs["barrier"], key=lambda r: int(r.config["seed"]))
    if barrier:
        run = barrier[0]
        kinds = bytes_by_kind(ledger_of(run))
        lines += ["", f"Barrier FedVKD per round (seed {run.config['seed']}): " + ", ".join(
            f"{d} {k} {v / len(run.rows) / 1e3:.0f} kB" for d, ks in kinds.items() for k, v in ks.items() if v)
            + " (one upload of 4 fields and one download of 2 per client and round; the round-0 download is empty; "
              "split learning would need 2 messages per minibatch)."]
    return lines


def plot(stats: SweepStatistics, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (part, title) in zip(axes[:2], PARTITIONS.items()):
        for v in ("fedvkd", "fedavg-vit", "fedgkt", "fedavg-cnn", "fedavg-edge"):
            runs = stats.runs.get(f"{v} {part}", [])
            if not runs:
                continue
            acc = np.array([[r.get("test_accuracy", np.nan) for r in run.rows] for run in runs], dtype=float) * 100
            curve = acc.mean(axis=0)
            sd = acc.std(axis=0, ddof=1) if len(acc) > 1 else np.zeros_like(curve)
            x = range(1, len(curve) + 1)
            line, = ax.plot(x, curve, label=NAMES[v])
            ax.fill_between(x, curve - sd, curve + sd, color=line.get_color(), alpha=0.2)
        ax.set_title(f"server accuracy, synth {title}")
        ax.set_xlabel("round")
        ax.set_ylabel("top-1 (%)")
    axes[0].legend(fontsize=7)
    names, means, sds = [], [], []
    for s in stats.settings:
        v, part = s.label.split(" ")
        edge = per_seed(stats, s.label, "edge_accuracy") if v != "fedavg-edge" else per_seed(stats, s.label,
                                                                                              "test_accuracy")
        if part == "p=0.2" and edge:
            sp = spread([x * 100 for x in edge.values()])
            names.append(NAMES[v])
            means.append(sp.mean)
            sds.append(sp.std or 0.0)
    axes[2].barh(names, means, xerr=sds)
    axes[2].set_title("edge-model accuracy, non-IID (E2), best round")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def results_block(sweep: Path, async_sweep: Path, plots: Path, readme: Path | None, argv: list[str]) -> str:
    stats = sweep_statistics(sweep, metric="test_accuracy", baseline=BASELINE)
    e6 = sweep_statistics(async_sweep, metric="test_accuracy", baseline="barrier")
    plot(stats, plots / "fedvkd_accuracy.png")
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    n = len(read_listing(sweep)['seeds'])
    return "\n".join([
        f"**Commands:** `{sweep_command(sweep)}`, `{sweep_command(async_sweep)}`, then "
        f"`{script_command(__file__, argv)}` (every cell is a run directory; "
        f"{len(stats.settings)} + {len(e6.settings)} settings x seeds {read_listing(sweep)['seeds']}).", "",
        "**E1/E2/E4: accuracy (%)**, best round of each run, mean ± std over seeds; server accuracy = mean over "
        "clients of server ∘ extractor_k; Δ = mean per-seed difference to FedAvg(ViT) at the same partition, in "
        f"points, with the paired t test and the Wilcoxon signed-rank test (two-sided; with {n} seeds the smallest "
        f"Wilcoxon p is {2 / 2 ** n:g}). Chance is 10 %.", "",
        *accuracy_block(stats), "",
        "**E6: barrier vs asynchronous FedVKD** (non-IID, watch/phone/laptop clients on a simulated clock; "
        "FedAsync-style schedule with 5 packets in flight):", "",
        *async_block(e6), "",
        f"![accuracy per round (mean ± std over seeds) and edge-model accuracy]({rel}/fedvkd_accuracy.png)", ""])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = tables_parser(__doc__, "the finished sweep of repro/fedvkd_sweep.toml")
    parser.add_argument("async_sweep", type=Path, help="the finished sweep of repro/fedvkd_async_sweep.toml")
    args = parser.parse_args(argv)
    emit(results_block(args.sweep, args.async_sweep, plots_dir(args, TAG), args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
