"""SA-FedLoRA vs its baselines and ablations at micro scale: accuracy and bytes communicated (spec §6.2).

"Pre-trained" = the micro ViT (timm, width 64, depth 4, 8x8 input) pre-trained by fedcore itself on
digits 0-4 (cached); the federated target task is digits 5-9 with a fresh head, 5 clients, Dirichlet
label skew, full participation. FedAvg and FedPer start from scratch, as in the paper.

    cd plugins/fedcore-safedlora
    nice python repro/reproduce.py --out runs/safedlora            # ~4 min, 1 thread
    nice python repro/reproduce.py --seeds 0 1 2 --out runs/safedlora

Writes ``results.json``, ``results.md``, ``accuracy_vs_bytes.png`` and ``rank_over_rounds.png``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import time

import numpy as np
import torch

import fedcore
from fedcore.data import load_digits
from fedcore.models import micro_vit, pretrained_for_target
from fedcore_safedlora.costs import MIB, converged_cost, cost_to_target, reduction

ROUNDS = 20
PLAN = dict(t2_rounds=ROUNDS, r_a=6, r_b=4, t_a=2, t_b=10, lora_init_std=None)


def _lora(update: dict, **plan) -> dict:
    return {"recipe": "sa-fedlora", "local_update": update, "plugins": [dict(plan, name="sa-fedlora-plan")]}


def methods(rounds: int) -> dict[str, dict]:
    """Method name -> (pipeline config: a recipe with settings per component, model kind); ``rounds`` rounds in all."""
    sa_update = {"e1_local_epochs": 10, "mu": 0.01, "e2_local_epochs": 2}
    sa = dict(PLAN, t1_rounds=1, t2_rounds=rounds - 1)
    lora = dict(PLAN, t2_rounds=rounds, t1_rounds=0)
    epochs = {"local_update": {"epochs": 2}}
    return {
        "Local": {"pipeline": {"recipe": "local", **epochs}, "model": "pretrained"},
        "FedAvg (scratch)": {"pipeline": {"recipe": "fedavg-scratch", **epochs}, "model": "scratch"},
        "FedPer (scratch)": {"pipeline": {"recipe": "fedper", **epochs}, "model": "scratch"},
        "FedFFT": {"pipeline": {"recipe": "fedfft", **epochs}, "model": "pretrained"},
        "FedBit": {"pipeline": {"recipe": "fedbit", **epochs}, "model": "pretrained"},
        "M1 FedLoRA r=4": {"pipeline": _lora(sa_update, **dict(lora, r_a=4, r_b=4)), "model": "pretrained"},
        "M2 annealing only": {"pipeline": _lora(sa_update, **lora), "model": "pretrained"},
        "M3 initiating only": {"pipeline": _lora(sa_update, **dict(sa, r_a=4, r_b=4)), "model": "pretrained"},
        "SA-FedLoRA cubic": {"pipeline": _lora(sa_update, **dict(sa, scheduler="cubic")), "model": "pretrained"},
        "SA-FedLoRA linear": {"pipeline": _lora(sa_update, **dict(sa, scheduler="linear")), "model": "pretrained"},
        "SA-FedLoRA cosine": {"pipeline": _lora(sa_update, **dict(sa, scheduler="cosine")), "model": "pretrained"},
    }


def run_one(spec: dict, seed: int, rounds: int, alpha: float, clients: int) -> list[dict]:
    train, test = load_digits(classes=(5, 6, 7, 8, 9), seed=0)
    if spec["model"] == "pretrained":
        model, _ = pretrained_for_target("micro-vit", head_seed=seed)
    else:
        model = micro_vit(num_classes=5)
    config = {"partition": {"name": "dirichlet", "alpha": alpha, "min_size": 20}, **spec["pipeline"]}
    result = fedcore.Pipeline.from_config(config).run(model=model, train=train, test=test, num_clients=clients,
                                                      rounds=rounds, seed=seed)
    return [dict(r) for r in result.history.rows]


def summarise(histories: dict[str, list[list[dict]]], target: float) -> list[dict]:
    rows = []
    for name, runs in histories.items():
        acc = [max(r["test_accuracy"] for r in h) for h in runs]
        final = [h[-1]["test_accuracy"] for h in runs]
        total = [h[-1]["bytes_up_total"] + h[-1]["bytes_down_total"] for h in runs]
        cc = [converged_cost(h) for h in runs]
        tc = [cost_to_target(h, target) for h in runs]
        rows.append({"method": name, "acc_max": float(np.mean(acc)), "acc_final": float(np.mean(final)),
                     "acc_max_std": float(np.std(acc)), "total_bytes": float(np.mean(total)),
                     "cc_bytes": float(np.mean(cc)),
                     "tc_bytes": None if any(t is None for t in tc) else float(np.mean(tc)),
                     "tc_reached": sum(t is not None for t in tc), "seeds": len(runs)})
    return rows


def table(rows: list[dict], target: float) -> str:
    base = next(r for r in rows if r["method"].startswith("FedAvg"))
    fft = next(r for r in rows if r["method"] == "FedFFT")
    lines = [f"| method | ACC (max) | final | total MiB | CC MiB | TC@{target:.2f} MiB | CC vs FedAvg | TC vs FedAvg | "
             f"TC vs FedFFT |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def red(key: str, ref: dict, r: dict = r) -> str:  # this row's reduction (r bound here)
            if r[key] is None or ref[key] is None or r["method"] == "Local":
                return "/"
            return f"{100 * reduction(r[key], ref[key]):.2f} %"
        tc = "/" if r["tc_bytes"] is None or r["method"] == "Local" else f"{r['tc_bytes'] / MIB:.2f}"
        lines.append(f"| {r['method']} | {r['acc_max']:.4f} ± {r['acc_max_std']:.3f} | {r['acc_final']:.4f} | "
                     f"{r['total_bytes'] / MIB:.2f} | {r['cc_bytes'] / MIB:.2f} | {tc} | {red('cc_bytes', base)} | "
                     f"{red('tc_bytes', base)} | {red('tc_bytes', fft)} |")
    return "\n".join(lines)


def plot(histories: dict[str, list[list[dict]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, runs in histories.items():
        h = runs[0]
        x = [(r["bytes_up_total"] + r["bytes_down_total"]) / MIB for r in h]
        if max(x) == 0:
            ax.axhline(h[-1]["test_accuracy"], ls=":", color="grey", label=f"{name} (no communication)")
            continue
        ax.plot(x, [r["test_accuracy"] for r in h], marker=".", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("cumulative bytes communicated (MiB, up + down, all clients)")
    ax.set_ylabel("test accuracy (digits 5-9)")
    ax.set_title("Accuracy vs communication: micro ViT, 5 clients, Dirichlet(0.5), first seed")
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "accuracy_vs_bytes.png", dpi=120)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, runs in histories.items():
        if "lora_rank" in runs[0][0]:
            ax.step([r["round"] for r in runs[0]], [r["lora_rank"] for r in runs[0]], where="post", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("LoRA rank r_t (0 = initiating stage, full model)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "rank_over_rounds.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/safedlora")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.85, help="accuracy for the target cost TC")
    parser.add_argument("--only", nargs="*", help="run only these methods")
    parser.add_argument("--replot", action="store_true", help="only redraw the plots from OUT/results.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        plot(json.loads((out / "results.json").read_text())["histories"], out)
        return
    histories: dict[str, list[list[dict]]] = {}
    start = time.perf_counter()
    for name, spec in methods(args.rounds).items():
        if args.only and name not in args.only:
            continue
        for seed in args.seeds:
            t0 = time.perf_counter()
            h = run_one(spec, seed, args.rounds, args.alpha, args.clients)
            histories.setdefault(name, []).append(h)
            print(f"{name:22s} seed {seed}: acc max {max(r['test_accuracy'] for r in h):.4f} final "
                  f"{h[-1]['test_accuracy']:.4f}  bytes "
                  f"{(h[-1]['bytes_up_total'] + h[-1]['bytes_down_total']) / MIB:8.2f} MiB"
                  f"  {time.perf_counter() - t0:5.1f}s", flush=True)
    rows = summarise(histories, args.target)
    md = table(rows, args.target) if any(r["method"].startswith("FedAvg") for r in rows) else ""
    print(md)
    (out / "results.md").write_text(md + "\n")
    (out / "results.json").write_text(json.dumps({"args": vars(args), "summary": rows, "histories": histories},
                                                 indent=1, default=float))
    plot(histories, out)
    print(f"total {time.perf_counter() - start:.0f}s; wrote {out}")


if __name__ == "__main__":
    main()
