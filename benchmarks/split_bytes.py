"""Bytes per round of FedV, FedVZ (literal and strict), SplitFed V1/V2 and FedAvg on the same model, from the ledger.

    nice python benchmarks/split_bytes.py [--rounds 4] [--fedround 2] [--vit-s]

Same micro ViT (timm, width 64, depth 4, 8x8, patch 2; ``--vit-s``: width 384, depth 12 on the same
inputs), same data (digits 5-9, Dir-0.3 over 10 clients, 5 per round), one local epoch, batch 32.
Every byte is what ``ctx.channel`` counted (payload tensors at their dtype). Split methods pay per
sample (smashed data and gradients); FedAvg pays per parameter, so the ratio depends on the model
size and on how many samples a client holds: both are printed. FedV/FedVZ upload heads and tails
only in rounds where ``round % fedround == 0``; the per-round figure averages over ``rounds``.
"""
from __future__ import annotations

import argparse

import torch

from fedcore import Pipeline
from fedcore.builtin import DirichletPartition, FedAvg, SGDUpdate, UniformSync, WholeModel
from fedcore.data import load_digits
from fedcore.models import micro_vit
from fedcore_fedv import FedV, FedVZ
from fedcore_split import SplitFedV1, SplitFedV2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fedround", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vit-s", action="store_true", help="ViT-S width/depth (384/12) instead of the micro ViT")
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    size = dict(embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0) if a.vit_s else {}
    train, test = load_digits(classes=(5, 6, 7, 8, 9))
    fed = dict(local_epochs=1, batch_size=a.batch, fedround=a.fedround)
    split = dict(epochs=1, batch_size=a.batch)
    runs = {
        "FedAvg (whole model)": [WholeModel(), SGDUpdate(optimizer="adam", lr=1e-3, epochs=1, batch_size=a.batch),
                                 FedAvg()],
        "SplitFed V1": [SplitFedV1(**split)],
        "SplitFed V2": [SplitFedV2(**split)],
        "FedV": [FedV(**fed)],
        "FedVZ (literal)": [FedVZ(**fed)],
        "FedVZ strict (head_grad_mode=zo)": [FedVZ(**fed, head_grad_mode="zo")],
    }
    torch.manual_seed(0)
    params = sum(p.numel() for p in micro_vit(num_classes=5, **size).parameters())
    print(f"model: {params:,} parameters ({params * 4 / 2**20:.2f} MiB fp32); {len(train)} training samples over "
          f"10 clients, 5 per round, {a.rounds} rounds, batch {a.batch}")
    rows = {}
    for name, comps in runs.items():
        torch.manual_seed(0)
        model = micro_vit(num_classes=5, **size)
        res = Pipeline([DirichletPartition(alpha=0.3), UniformSync(fraction=0.5), *comps]).run(
            model=model, train=train, test=None, num_clients=10, rounds=a.rounds, seed=0)
        led = res.ledger
        rows[name] = {"total": led.total() / a.rounds, "up": led.total(direction="up") / a.rounds,
                      "down": led.total(direction="down") / a.rounds,
                      "kinds": {f"{d}:{k}": v / a.rounds for (d, k), v in sorted(led.by_kind().items())}}
    base = rows["FedAvg (whole model)"]["total"]
    fedv = rows["FedV"]["total"]
    print(f"\n{'method':34s} {'MiB/round':>10s} {'up':>8s} {'down':>8s} {'x FedAvg':>9s} {'x FedV':>7s}")
    for name, r in rows.items():
        print(f"{name:34s} {r['total'] / 2**20:10.3f} {r['up'] / 2**20:8.3f} {r['down'] / 2**20:8.3f} "
              f"{r['total'] / base:9.3f} {r['total'] / fedv:7.3f}")
    print("\nper kind (KiB/round):")
    for name, r in rows.items():
        print(f"  {name}: " + ", ".join(f"{k} {v / 1024:.1f}" for k, v in r["kinds"].items()))
    d = rows["FedVZ (literal)"]["kinds"]
    print(f"\nFedVZ's encoder update costs {d.get('down:query-output', 0):.0f} B down (perturbed outputs) + "
          f"{d.get('up:losses', 0):.0f} B up (loss scalars) per round; per-step traffic equals FedV's: "
          f"smashed {rows['FedV']['kinds'].get('up:smashed', 0) == d.get('up:smashed', 0)}, "
          f"output-grad {rows['FedV']['kinds'].get('up:output-grad', 0) == d.get('up:output-grad', 0)}")


if __name__ == "__main__":
    main()
