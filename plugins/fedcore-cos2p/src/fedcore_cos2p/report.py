"""Tables and plots of the micro reproduction, written into the plugin README between marker comments."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
import statistics
from typing import Any

BEGIN, END = "<!-- cos2p-repro:begin -->", "<!-- cos2p-repro:end -->"
MAIN = ("Co-S2P", "FedRolex", "HeteroFL", "FedAvg(Full)", "Co-S2P(Async.)")
ABLATIONS = ("Co-S2P", "random masks (linear)", "random masks (MSA)", "random masks (both)", "no self-distillation")


def mean_std(values: Sequence[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f} (1 seed)"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} ({len(values)} seeds)"


def accuracy_at(curve: Sequence[Sequence[float]], budget: float) -> float:
    """Test accuracy of the last evaluation at or before virtual time ``budget``."""
    seen = [acc for t, acc in curve if t <= budget + 1e-12 and acc is not None]
    return float(seen[-1]) if seen else 0.0


def paired(a: Sequence[float], b: Sequence[float]) -> str:
    if len(a) < 2 or len(a) != len(b):
        return "n/a (fewer than 2 paired seeds)"
    from scipy.stats import ttest_rel

    diff = [x - y for x, y in zip(a, b)]
    if all(d == diff[0] for d in diff):
        return f"mean diff {statistics.mean(diff):+.3f} (identical across seeds)"
    return f"mean diff {statistics.mean(diff):+.3f}, paired t-test p = {ttest_rel(a, b).pvalue:.3f}"


def _runs(results: dict[str, Any], method: str) -> list[dict[str, Any]]:
    return sorted([r for r in results["runs"] if r["method"] == method and "refused" not in r], key=lambda r: r["seed"])


def write_report(results: dict[str, Any], plugin_dir: Path) -> str:
    lines: list[str] = []
    cal = results.get("calibration", {})
    if cal:
        lines.append(f"Calibration: AGX64/NX speed ratio r = {cal['ratio']:.2f} gives synchronous FedAvg(Full) the "
                     f"paper's E1 RU of {cal['target_ru']:.3f} (client sizes {cal['train_sizes']}); median Co-S2P "
                     f"client round {cal.get('median_round_s', float('nan')):.4g} virtual s, T_clk = 0.25 x median.")
        lines.append("")
    main = {m: _runs(results, m) for m in MAIN}
    # the budget: the shortest virtual time any round-based method reached (the asynchronous variant's
    # aggregations each merge one arrival, so its run may end earlier; it is marked, not allowed to shrink it)
    finals = [r["curve"][-1][0] for m, runs in main.items() if m != "Co-S2P(Async.)" for r in runs if r["curve"]]
    budget = min(finals) if finals else 0.0
    lines += [f"**R1 + R4: RU (Eq. 17), busy fraction and server accuracy at an equal virtual-time budget "
              f"({budget:.4g} s)**", "", "| method | RU | busy fraction | accuracy at the budget | final accuracy |",
              "|---|---|---|---|---|"]
    for m, runs in main.items():
        short = any(r["curve"] and r["curve"][-1][0] < budget for r in runs)
        m = m + (" (ended before the budget)" if short else "")
        lines.append(f"| {m} | {mean_std([r['ru'] for r in runs])} | {mean_std([r['busy'] for r in runs])} | "
                     f"{mean_std([accuracy_at(r['curve'], budget) for r in runs])} | "
                     f"{mean_std([r['final_accuracy'] for r in runs])} |")
    co, rolex = main["Co-S2P"], main["FedRolex"]
    n = min(len(co), len(rolex))
    acc_co = [accuracy_at(r["curve"], budget) for r in co[:n]]
    acc_rx = [accuracy_at(r["curve"], budget) for r in rolex[:n]]
    lines += ["", f"Paired Co-S2P vs FedRolex over seeds: accuracy at the budget {paired(acc_co, acc_rx)}; "
              f"RU {paired([r['ru'] for r in co[:n]], [r['ru'] for r in rolex[:n]])}.", ""]
    claims: list[tuple[str, str, str, str]] = []
    if co and rolex:
        ru_ratio = statistics.mean(r["ru"] for r in co) / statistics.mean(r["ru"] for r in rolex)
        claims.append(("RU 1.1–1.2x over FedRolex", f"{ru_ratio:.2f}x", "yes" if ru_ratio >= 1.1 else "no",
                       "semi-async vs sync rounds on the calibrated Jetson profiles"))
        diff = statistics.mean(acc_co) - statistics.mean(acc_rx) if n else float("nan")
        claims.append(("accuracy over FedRolex", f"{diff:+.3f} at equal virtual time",
                       "yes" if diff > 0 else "no", paired(acc_co, acc_rx)))
    costs = results.get("costs", [])
    if costs:
        lines += ["**R2 + R3: memory (Adan, batch per device) and FLOPs per sample, E1 ViT-Tiny\\* (224², patch 16), "
                  "from the substrate's counters (not measured on a GPU)**", "",
                  "| device | R_n | batch | method | trainable params | frozen params | memory MB | GFLOP/sample |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in costs:
            lines.append(f"| {c['device']} | {c['budget']} | {c['batch']} | {c['method']} | "
                         f"{c['trainable_params']:,} | {c['frozen_params']:,} | {c['memory_bytes'] / 2**20:.0f} | "
                         f"{c['flops_per_sample'] / 1e9:.2f} |")
        mem, flop = [], []
        for device in dict.fromkeys(c["device"] for c in costs):
            rows = {c["method"]: c for c in costs if c["device"] == device}
            for co_key in ("Co-S2P (window at 0)", "Co-S2P (window at top)"):
                mem.append(rows[co_key]["memory_bytes"] / rows["FedRolex (beta = R)"]["memory_bytes"] - 1)
                flop.append(rows[co_key]["flops_per_sample"] / rows["FedRolex (beta = R)"]["flops_per_sample"] - 1)
        claims.append(("−22% memory vs FedRolex", f"{min(mem):+.0%} to {max(mem):+.0%}",
                       "yes" if max(mem) <= -0.22 else ("partly" if min(mem) < 0 else "no"),
                       "memory model, equal trainable-parameter budget (FedRolex β = R_n), per device and window"))
        claims.append(("−24% time vs FedRolex", f"{min(flop):+.0%} to {max(flop):+.0%}",
                       "yes" if max(flop) <= -0.24 else ("partly" if min(flop) < 0 else "no"),
                       "compute time ∝ training FLOPs per sample on the same device"))
        lines.append("")
    abl = [(m, _runs(results, m)) for m in ABLATIONS]
    lines += ["**R5 (Tab. 3) and R7 (Tab. 8): ablations, final server accuracy (seed 0)**", "",
              "| variant | final accuracy | RU |", "|---|---|---|"]
    for m, runs in abl + [(m, _runs(results, m)) for m in ("ratio 2",)]:
        lines.append(f"| {m} | {mean_std([r['final_accuracy'] for r in runs[:1]])} | "
                     f"{mean_std([r['ru'] for r in runs[:1]])} |")
    for r in results["runs"]:
        if "refused" in r:
            lines.append(f"| {r['method']} | refused: {r['refused']} | – |")
    grid = results.get("grid", [])
    if grid:
        lines += ["", "**R6 (Fig. 6): μ × T_clk grid (seed 0, half the rounds)**", "",
                  "| μ | T_clk / median | final accuracy | RU | virtual time |", "|---|---|---|---|---|"]
        for g in sorted(grid, key=lambda g: (g["mu"], g["t_clk_factor"])):
            lines.append(f"| {g['mu']} | {g['t_clk_factor']} | {g['accuracy']:.3f} | {g['ru']:.3f} | "
                         f"{g['virtual_time']:.4g} |")
    hist = co[0]["staleness"] if co else {}
    if hist:
        lines += ["", "**R8: staleness of the merged updates (Co-S2P, seed 0)**: " +
                  ", ".join(f"τ={k}: {v}" for k, v in hist.items())]
    cpu = sum(r.get("cpu_s", 0.0) for r in results["runs"])
    lines += ["", f"CPU time of the training runs: {cpu / 60:.1f} min (1 thread).", "",
              "**Claims of the paper at micro scale**", "", "| claim | micro-scale number | holds? | how |",
              "|---|---|---|---|"] + [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in claims]
    _plot(main, plugin_dir / "cos2p_accuracy.png")
    block = "\n".join(lines)
    readme = plugin_dir / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN) + len(BEGIN)] + "\n" + block + "\n" + text[text.index(END):]
        readme.write_text(text)
    return block


def _plot(main: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, runs in main.items():
        if runs:
            t, acc = zip(*[(t, a) for t, a in runs[0]["curve"] if a is not None])
            ax.plot(t, acc, marker=".", label=m)
    ax.set_xlabel("simulated wall-clock (virtual s)")
    ax.set_ylabel("server test accuracy")
    ax.set_title("micro-E1, seed 0")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
