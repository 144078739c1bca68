"""Bytes per round of the LoRA stage vs full-model FedAvg on the same model: ledger beside the analytic count.

    nice python benchmarks/lora_bytes.py

One round of each method per model, 5 clients; the ledger's bytes are what crossed ``Channel.up/down``.
Analytic: full = S x 4 x |W| each way; LoRA = S x 4 x (r x Σ(d_in + d_out) + |head|) each way (spec §2.6).
"""
from __future__ import annotations

import torch

import fedcore
from fedcore.data import synthetic_classification
from fedcore.models import micro_vit
from fedcore_lora import inject_lora, lora_numel_per_rank

S = 5
MODELS = {
    "micro-vit w64 d4": dict(embed_dim=64, depth=4, num_heads=4),
    "vit w192 d6": dict(embed_dim=192, depth=6, num_heads=3),
}


def one_round(config: dict, model: torch.nn.Module) -> tuple[int, int]:
    full = synthetic_classification(n=100, num_classes=5, seed=0)
    result = fedcore.Pipeline.from_config(config).run(model=model, train=full.subset(range(80)),
                                                      test=full.subset(range(80, 100)), num_clients=S, rounds=1)
    row = result.history.rows[0]
    return row["bytes_down"], row["bytes_up"]


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'model':18s} {'method':10s} {'down (ledger)':>14s} {'up (ledger)':>12s} {'analytic/dir':>13s} "
          f"{'match':>5s} {'vs full':>8s}")
    for label, kw in MODELS.items():
        torch.manual_seed(0)
        base = micro_vit(num_classes=5, **kw)
        n_params = sum(p.numel() for p in base.parameters())
        head = sum(p.numel() for n, p in base.named_parameters() if n.startswith("head."))
        down, up = one_round({"recipe": "fedfft", "local_update": {"epochs": 1}}, base)
        analytic_full = S * 4 * n_params
        print(f"{label:18s} {'full':10s} {down:14d} {up:12d} {analytic_full:13d} "
              f"{str(down == up == analytic_full):>5s} {1.0:8.4f}")
        for r in (2, 4, 8):
            torch.manual_seed(0)
            model = micro_vit(num_classes=5, **kw)
            probe = micro_vit(num_classes=5, **kw)
            inject_lora(probe, rank=1)
            per_rank = lora_numel_per_rank(probe)
            config = {"recipe": "fedlora", "local_update": {"e2_local_epochs": 1},
                      "plugins": [{"name": "sa-fedlora-plan", "r_a": r, "r_b": r, "t2_rounds": 2}]}
            down, up = one_round(config, model)
            analytic = S * 4 * (r * per_rank + head)
            print(f"{label:18s} {'lora r=' + str(r):10s} {down:14d} {up:12d} {analytic:13d} "
                  f"{str(down == up == analytic):>5s} {down / analytic_full:8.4f}")


if __name__ == "__main__":
    main()
