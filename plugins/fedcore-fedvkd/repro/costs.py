"""FedVKD's E0 (spec 002 Sec. 6.3): parameters and forward MACs of the paper-scale models, and the uplink per sample.

    cd plugins/fedcore-fedvkd
    python repro/costs.py --write README.md

Analytic, not a training run: the models are built at paper size with random init and their MACs counted by
a FLOP counter (spec Sec. 4.4), so nothing depends on a seed and there is nothing to sweep or average. The
seeded experiments (E1, E2, E4, E6) are ``fedcore sweep`` runs: repro/fedvkd_sweep.toml,
repro/fedvkd_async_sweep.toml and repro/tables.py. Writes the table between
``<!-- generated:fedvkd-costs -->`` and ``<!-- /generated:fedvkd-costs -->``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import sys
import time

import torch

from fedcore.experiment import emit, script_command
from fedcore_distill import forward_macs, num_params, paper_models

TAG = "fedvkd-costs"
SHAPES = {"cifar": ((3, 32, 32), (64, 32, 32)), "imagenet": ((3, 224, 224), (64, 56, 56))}
"""image -> (input shape, the edge's feature map after conv1 + layer1)."""


def paper_costs() -> list[tuple[str, str, str]]:
    """(model, params, forward MACs per sample) rows for CIFAR and ImageNet sizes."""
    rows = []
    for image, (shape, fmap) in SHAPES.items():
        m = paper_models(image)
        edge = forward_macs(m["edge"], shape)
        for label, module, inp in (("edge extractor (conv1+layer1)", m["extractor"], shape),
                                   ("edge ResNet-18 (FedVKD/FedGKT edge)", m["edge"], shape),
                                   ("ViT-B server (+ patch embed)", m["vit_server"], fmap),
                                   ("ResNet-109 server", m["resnet109"], fmap),
                                   ("FedAvg(ViT) edge model", m["fedavg_vit"], shape),
                                   ("FedAvg(CNN) ResNet-113 edge model", m["fedavg_cnn"], shape)):
            rows.append((f"{image}: {label}", f"{num_params(module) / 1e6:.2f} M",
                         f"{forward_macs(module, inp) / 1e9:.3f} G"))
        rows.append((f"{image}: edge MAC ratio FedAvg(ViT) : FedVKD", "",
                     f"{forward_macs(m['fedavg_vit'], shape) / edge:.1f}x"))
        c, h, w = fmap
        rows.append((f"{image}: uplink features per sample (fp32)", "", f"{c * h * w * 4 / 1024:.0f} KiB"))
    return rows


def costs_block(rows: list[tuple[str, str, str]], seconds: float) -> str:
    return "\n".join([f"Command: `{script_command(__file__, sys.argv[1:])}` ({seconds:.0f} s).", "",
                      "**E0: costs at paper scale** (random init, FLOP counter on the meta device; spec §4.4):", "",
                      "| model | params | forward MACs / sample |", "|---|---|---|",
                      *(f"| {m} | {p} | {c} |" for m, p, c in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="README", help="replace the marked block in this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    emit(costs_block(paper_costs(), time.perf_counter() - start), args.write, TAG)


if __name__ == "__main__":
    main()
