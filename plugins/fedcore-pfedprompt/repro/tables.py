"""The pFedPrompt README's results block, from a finished ``fedcore sweep`` of ``repro/pfedprompt_sweep.toml``.

    cd plugins/fedcore-pfedprompt
    nice fedcore sweep repro/pfedprompt_sweep.toml --jobs 2 --out runs/pfedprompt-sweep
    python repro/tables.py runs/pfedprompt-sweep --write README.md

Methods x shots, mean ± std across seeds, of what every cell recorded: ``local_accuracy`` (pFedPrompt at the
fixed α), ``local_accuracy_local_space``, ``heldout_accuracy@selected`` (α picked on the validation half) and the
oracle (the best ``local_accuracy@alpha=a`` of the same cell: α picked on the test images); then the paired
comparisons by seed (t test and Wilcoxon). Writes the block between ``<!-- generated:pfedprompt-results -->``
and ``<!-- /generated:pfedprompt-results -->``, the sweep's statistics and plots under ``results/pfedprompt-results/``.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
import sys
from typing import Any

from fedcore.experiment import (
    Paired,
    RunRecord,
    emit,
    not_finished,
    paired,
    plots_dir,
    read_listing,
    script_command,
    spread,
    sweep_statistics,
    tables_parser,
    write_sweep_report,
)

TAG = "pfedprompt-results"
NAMES = {"promptfl": "PromptFL", "promptfl-ft": "PromptFL+FT", "promptper": "PromptPer", "promptprox": "PromptProx",
         "promptamp": "PromptAMP", "pfedprompt-thesis": "pFedPrompt (class-average memory, thesis)",
         "pfedprompt-sum": "pFedPrompt (summed similarities)", "label-prior": "label prior only"}
MEMORY = ("pfedprompt-thesis", "pfedprompt-sum", "label-prior")
"""The variants whose evaluator records the α grid and the held-out α."""
HELD_OUT = ("promptfl", *MEMORY)
PAIRS_HELD_OUT = (("pfedprompt-thesis", "promptfl"), ("pfedprompt-sum", "promptfl"),
                  ("pfedprompt-thesis", "label-prior"), ("pfedprompt-sum", "label-prior"),
                  ("pfedprompt-sum", "pfedprompt-thesis"))
THESIS_ALPHA = 2.55
"""The fixed α is the thesis's 2-shot α rescaled: α_thesis = α · THESIS_ALPHA / (the config's fixed α)."""

Values = dict[int, float]


def last(run: RunRecord, pick: Callable[[dict[str, Any]], float | None]) -> float | None:
    for row in reversed(run.rows):
        v = pick(row)
        if v is not None:
            return v
    return None


def oracle(row: dict[str, Any]) -> float | None:
    grid = [v for k, v in row.items() if k.startswith("local_accuracy@alpha=")]
    return max(grid) if grid else None


class Table:
    """Per (variant, shots): seed -> value, read once from the sweep's finished cells."""

    def __init__(self, sweep: Path, metric: str) -> None:
        self.stats = sweep_statistics(sweep, metric=metric)
        self.shots = sorted({int(s.label.split("shots=")[1]) for s in self.stats.settings})

    def values(self, variant: str, shots: int, pick: Callable[[dict[str, Any]], float | None] | None = None
               ) -> Values:
        label = f"{variant} shots={shots}"
        if pick is None:
            return dict(self.stats.get(label).values)
        out = {}
        for run in self.stats.runs[label]:
            v = last(run, pick)
            if v is not None:
                out[int(run.config["seed"])] = v
        return out


def mean_std(values: Values) -> str:
    if not values:
        return "-"
    s = spread([100 * v for v in values.values()])
    return f"{s.mean:.1f} ± {s.std or 0.0:.1f}"


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


def diff(p: Paired | None) -> str:
    return "-" if p is None else f"{100 * p.mean_diff:+.1f} ({_p(p.t_p)} / {_p(p.wilcoxon_p)})"


def grid(head: str, shots: list[int], rows: list[tuple[str, list[str]]]) -> list[str]:
    out = [f"| {head} | " + " | ".join(f"N={s}" for s in shots) + " |", "|---" + "|---:" * len(shots) + "|"]
    return out + [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]


def shots_plot(fixed: Table, held: Table, variants: list[str], out: Path) -> Path:
    """Accuracy against shots, mean ± std over seeds: the fixed α (left) and the held-out α (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, table, names, title in ((axes[0], fixed, variants, "fixed α (all test images)"),
                                    (axes[1], held, list(HELD_OUT), "α picked on the validation half (held-out half)")):
        for v in names:
            found = [(s, table.values(v, s)) for s in table.shots]
            found = [(s, spread([100 * x for x in vals.values()])) for s, vals in found if vals]
            if found:
                ax.errorbar([s for s, _ in found], [st.mean for _, st in found],
                            yerr=[st.std or 0.0 for _, st in found], marker="o", capsize=3, label=NAMES[v],
                            color=f"C{list(NAMES).index(v)}",
                            linestyle=":" if v in ("label-prior", "promptprox") else "-")
        ax.set_xscale("log", base=2)
        ax.set_xticks(table.shots, [str(s) for s in table.shots])
        ax.set_xlabel("shots per class N")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("local accuracy (%), mean ± std over seeds")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "accuracy_vs_shots.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def results_block(sweep: Path, plots: Path, readme: Path | None, argv: list[str]) -> str:
    listing = read_listing(sweep)
    fixed = Table(sweep, "local_accuracy")
    local = Table(sweep, "local_accuracy_local_space")
    held = Table(sweep, "heldout_accuracy@selected")
    shots, seeds = fixed.shots, listing["seeds"]
    variants = [v for v in NAMES if f"{v} shots={shots[0]}" in {s.label for s in fixed.stats.settings}]
    write_sweep_report(sweep, plots, metric="local_accuracy")
    base_alpha = float(fixed.stats.runs[f"pfedprompt-thesis shots={shots[0]}"][0].config["pipeline"]["evaluate"]
                       ["alpha"])
    picked = {v: {s: held.values(v, s, lambda r: r.get("alpha_selected")) for s in shots} for v in MEMORY}
    out = [f"**Commands:** `{listing.get('command')}`, then `{script_command(__file__, argv)}` "
           f"({len(listing['settings'])} settings x seeds {seeds}; every cell is a run directory).", "",
           "Local accuracy (%), mean ± std over seeds: each client's test images of its 3 classes predicted over "
           "all 30 classes, mean over clients. pFedPrompt rows use the fixed α (the thesis's 2-shot α rescaled); "
           "the oracle rows are the same cells' best α on the test images (the thesis's protocol, optimistic):", ""]
    rows = [(NAMES[v], [mean_std(fixed.values(v, s)) for s in shots]) for v in variants]
    rows += [(f"{NAMES[v]}, oracle α", [mean_std(fixed.values(v, s, oracle)) for s in shots]) for v in MEMORY]
    out += grid("method", shots, rows)
    out += ["", "The same, predicted over each client's own classes only (local label space):", ""]
    out += grid("method (own classes only)", shots, [(NAMES[v], [mean_std(local.values(v, s)) for s in shots])
                                                      for v in variants])
    out += ["", "α picked on a validation half of each client's test split (one α per run), scored on the other "
            "half (PromptFL: α = 0 on the same half); below, the α picked per seed in thesis units "
            f"(α · {THESIS_ALPHA} / {base_alpha:.4g}):", ""]
    rows = [(NAMES[v], [mean_std(held.values(v, s)) for s in shots]) for v in HELD_OUT]
    rows += [(f"α picked, {NAMES[v]}", [" / ".join(f"{a * THESIS_ALPHA / base_alpha:.3g}" for _, a in
                                                   sorted(picked[v][s].items())) for s in shots]) for v in MEMORY]
    out += grid("method (held-out half)", shots, rows)
    out += ["", "Paired by seed: mean difference in points (paired t p / two-sided Wilcoxon p; with "
            f"{len(seeds)} seeds the smallest possible Wilcoxon p is {2 / 2 ** len(seeds):.3g}):", ""]
    rows = [(f"held-out: {NAMES[a]} − {NAMES[b]}", [diff(paired(held.values(b, s), held.values(a, s)))
                                                     for s in shots]) for a, b in PAIRS_HELD_OUT]
    rows += [(f"fixed α: {NAMES[v]} − {NAMES['pfedprompt-thesis']}",
              [diff(fixed.stats.get(f"{v} shots={s}").vs_baseline) for s in shots])
             for v in variants if v != "pfedprompt-thesis"]
    rows += [(f"fixed α: {NAMES['pfedprompt-sum']} − {NAMES[b]}",
              [diff(fixed.stats.compare(f"pfedprompt-sum shots={s}", f"{b} shots={s}")) for s in shots])
             for b in ("promptfl-ft", "promptper") if b in variants]
    rows += [(f"own classes: {NAMES[a]} − {NAMES['promptfl']}", [diff(paired(local.values("promptfl", s),
                                                                               local.values(a, s))) for s in shots])
             for a in MEMORY]
    out += grid("comparison", shots, rows)
    missing = not_finished(fixed.stats)
    if missing:
        out += ["", missing]
    rel = plots.relative_to(readme.parent) if readme is not None else plots
    shots_plot(fixed, held, variants, plots)
    out += ["", f"![local accuracy against shots, mean ± std]({rel}/accuracy_vs_shots.png)", "",
            f"![local accuracy per setting, mean and 95% interval]({rel}/sweep_final.png) "
            f"![local accuracy over rounds, mean ± std]({rel}/sweep_accuracy_vs_round.png)", ""]
    return "\n".join(out)


def main() -> None:
    argv = sys.argv[1:]
    args = tables_parser(__doc__).parse_args(argv)
    emit(results_block(args.sweep, plots_dir(args, TAG), args.write, argv), args.write, TAG)


if __name__ == "__main__":
    main()
