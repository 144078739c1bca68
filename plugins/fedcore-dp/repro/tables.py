"""The fedcore-dp README's results blocks, each from one command (nothing typed by hand).

    nice -n 19 fedcore sweep repro/dp_utility_sweep.toml --jobs 1 --out runs/dp-utility
    cd plugins/fedcore-dp
    python repro/tables.py utility runs/dp-utility --write README.md
    python repro/tables.py inversion --write README.md

``utility``: per setting of the sweep, ε at the run's δ (the accountant's value after the last aggregation) and
the final test accuracy over the seeds (mean ± std), paired per seed with the non-private run (mean difference,
paired t and Wilcoxon p), and the privacy-utility curve as a PNG next to the README. ``inversion``: the
gradient-inversion check (:mod:`fedcore_dp.inversion`) on 5 digits test images, plain against DP releases.
Without ``--write`` a block is printed only.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
import shlex
import statistics
import sys

TAGS = {"utility": "dp-utility-results", "inversion": "dp-inversion-results"}


def replace_block(readme: Path, tag: str, markdown: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- generated:{tag} -->", f"<!-- /generated:{tag} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{readme} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    readme.write_text(f"{head}{start}\n{markdown.strip()}\n{end}{tail}")


def _p(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2g}" if v >= 1e-4 else f"{v:.1e}")


def _noise(run) -> str:  # type: ignore[no-untyped-def]
    for spec in run.config.get("pipeline", {}).get("plugins", []):
        if isinstance(spec, dict) and spec.get("name") == "dp-fedavg":
            z = spec.get("noise_multiplier", 1.0)
            return f"{z:g}" + (" (adaptive C)" if spec.get("clipping") == "adaptive" else "")
    return "none"


def utility(sweep: Path, readme: Path | None) -> str:
    from fedcore.experiment import sweep_command, sweep_statistics

    stats = sweep_statistics(sweep, metric="test_accuracy", baseline="non-private")
    points, lines = [], [
        "| setting | noise multiplier z | ε at δ = 1e-3 | test accuracy (%) mean ± std | Δ vs non-private (points) "
        "| paired t p | Wilcoxon p | seeds |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in stats.settings:
        runs = stats.runs[s.label]
        eps = sorted({round(r.rows[-1]["dp_epsilon"], 6) for r in runs if "dp_epsilon" in r.rows[-1]})
        eps_text = "∞ (no noise)" if s.label == "clip-only" else ("-" if not eps else "/".join(f"{e:.3g}" for e in eps))
        sp = s.spread
        acc = "-" if sp is None else f"{100 * sp.mean:.1f}" + ("" if sp.std is None else f" ± {100 * sp.std:.1f}")
        if s.vs_baseline is None:
            diff, t, w = "(baseline)", "", ""
        else:
            diff, t, w = f"{100 * s.vs_baseline.mean_diff:+.1f}", _p(s.vs_baseline.t_p), _p(s.vs_baseline.wilcoxon_p)
        lines.append(f"| {s.label} | {_noise(runs[0]) if runs else '-'} | {eps_text} | {acc} | {diff} | {t} | {w} "
                     f"| {len(s.values)} |")
        if eps and sp is not None:
            points.append((s.label, eps[0], sp.mean, sp.std or 0.0))
    base = stats.get("non-private").spread
    per_seed = ["", "Per seed (final test accuracy, seeds " + ", ".join(map(str, sorted(stats.get(
        "non-private").values))) + "):", ""]
    for s in stats.settings:
        per_seed.append(f"- {s.label}: " + ", ".join(f"{100 * s.values[k]:.1f}" for k in sorted(s.values)))
    pairs = [(a, b) for a, b in (("z1.0-adaptive", "z1.0"), ("z0.3", "clip-only"))
             if a in stats.runs and b in stats.runs]
    if pairs:
        per_seed += ["", "Paired by seed (accuracy points):", ""]
    for other, base_label in pairs:
        c = stats.compare(other, base_label)
        if c is not None:
            per_seed.append(f"- {other} − {base_label}: {100 * c.mean_diff:+.1f} (paired t p = {_p(c.t_p)}, "
                            f"Wilcoxon p = {_p(c.wilcoxon_p)}, n = {c.n})")
    plot = None
    if readme is not None and points and base is not None:
        plot = _curve(points, base.mean, readme.parent / "results" / "dp-utility" / "epsilon_vs_accuracy.png")
    head = [f"Made by `{sweep_command(sweep)}` then `python {' '.join(shlex.quote(a) for a in sys.argv)}`.", ""]
    tail = [] if plot is None else ["", f"![ε against accuracy]({plot.relative_to(readme.parent)})"]  # type: ignore
    return "\n".join(head + lines + per_seed + tail)


def _curve(points: Sequence[tuple[str, float, float, float]], baseline: float, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for adaptive, style in ((False, {"marker": "o", "label": "DP-FedAvg, fixed C (mean ± std, 5 seeds)"}),
                            (True, {"marker": "s", "linestyle": "none", "label": "adaptive C"})):
        ordered = sorted((p for p in points if ("adaptive" in p[0]) == adaptive), key=lambda p: p[1])
        if not ordered:
            continue
        ax.errorbar([p[1] for p in ordered], [100 * p[2] for p in ordered], yerr=[100 * p[3] for p in ordered],
                    capsize=3, **style)
        for label, e, acc, _ in ordered:
            ax.annotate(label, (e, 100 * acc), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.axhline(100 * baseline, color="grey", linestyle="--", label="non-private")
    ax.set_xscale("log")
    low, high = min(p[1] for p in points) / 2, max(p[1] for p in points) * 2
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100) if low <= t <= high]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("ε at δ = 1e-3 (RDP, dp-accounting)")
    ax.set_ylabel("final test accuracy (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def inversion(images: int, readme: Path | None) -> str:
    import torch

    from fedcore.data import load_digits
    from fedcore.experiment import paired
    from fedcore.models import tiny_mlp
    from fedcore_dp.inversion import inversion_check

    train, test = load_digits(seed=0)
    mean = train.x.float().mean(0, keepdim=True)
    table: dict[tuple[str, str], list[dict]] = {}
    for i in range(images):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(i)
            model = tiny_mlp(num_classes=10, in_features=64, hidden=64)
        rows = inversion_check(model, test.x[i:i + 1].float(), test.y[i:i + 1], public_mean=mean, client_lr=0.1,
                               clip_norm=0.1, noise_multipliers=(0.0, 0.1, 0.5, 1.0), steps=300, seed=i)
        for r in rows:
            key = (r["update"], "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:g}")
            table.setdefault(key, []).append(r)
    plain = {i: r["mse"] for i, r in enumerate(table[("plain", "-")])}
    lines = ["| update the server sees | noise multiplier z (C = 0.1) | reconstruction MSE mean ± std | PSNR (dB) | "
             "label recovered | Δ MSE vs plain (paired t p) |", "|---|---:|---:|---:|---:|---:|"]
    for (name, z), rows in table.items():
        mse = [r["mse"] for r in rows]
        psnr = [r["psnr"] for r in rows]
        labels = [r["label_correct"] for r in rows if r["label_correct"] is not None]
        p = None if name == "plain" else paired(plain, {i: v for i, v in enumerate(mse)})
        versus = "(baseline)" if p is None else f"{p.mean_diff:+.3f} ({_p(p.t_p)})"
        what = {"plain": "plain update Δ", "dp": "clip(Δ, C) + N(0, (zC)²)"}.get(name, name)
        lines.append(f"| {what} | {z} | {statistics.mean(mse):.3f} ± {statistics.stdev(mse):.3f} | "
                     f"{statistics.mean(psnr):.1f} | {f'{sum(labels)}/{len(labels)}' if labels else '-'} | {versus} |")
    head = [f"Made by `python {' '.join(shlex.quote(a) for a in sys.argv)}`: {images} digits test images (the first "
            f"{images}), one per seed-{'0..' + str(images - 1)} tiny MLP (64-64-10, untrained), each the only image "
            "of a client that takes one SGD step (lr 0.1) and uploads the change; iDLG label inference, then 300 Adam "
            "steps of cosine gradient matching. MSE on [0, 1] pixels (lower = better reconstruction).", ""]
    return "\n".join(head + lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="block", required=True)
    u = sub.add_parser("utility", help="the privacy-utility table and curve from a finished sweep")
    u.add_argument("sweep", type=Path)
    u.add_argument("--write", type=Path, metavar="README")
    i = sub.add_parser("inversion", help="the gradient-inversion table (runs the attack)")
    i.add_argument("--images", type=int, default=5)
    i.add_argument("--write", type=Path, metavar="README")
    args = parser.parse_args(argv)
    text = utility(args.sweep, args.write) if args.block == "utility" else inversion(args.images, args.write)
    print(text)
    if args.write is not None:
        replace_block(args.write, TAGS[args.block], text)
        print(f"wrote the block {TAGS[args.block]!r} into {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
