"""The reference configurations of the bit-identity test: small runs of the SA-FedLoRA family.

``python reference_runs.py OUT.json`` recorded ``data/multi_slot_reference.json`` from the multi-slot
classes of fedcore-safedlora 0.1 (before the methods became recipes); the test replays the same
configurations as recipes and compares histories and final weights exactly.
"""
from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import torch

import fedcore
from fedcore.data import synthetic_classification
from fedcore.models import micro_vit

HISTORY_KEYS = ("round", "clients", "train_loss", "num_examples", "bytes_up", "bytes_down", "test_accuracy",
                "test_loss", "stage", "lora_rank", "test_accuracy_min", "test_accuracy_local")
SA = dict(t1_rounds=1, e1_local_epochs=1, t2_rounds=4, e2_local_epochs=1, r_a=3, r_b=2, t_a=1, t_b=2)
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "sa": ("sa-fedlora", SA),
    "sa-product-svd-slice": ("sa-fedlora", dict(SA, aggregation_mode="product_svd", truncation="slice")),
    "m1": ("fedlora", dict(t2_rounds=4, e2_local_epochs=1, r_a=2, r_b=2)),
    "m3": ("sa-fedlora", dict(SA, r_a=2, r_b=2)),
    "fedper": ("fedper", dict(epochs=1)),
    "fedbit": ("fedbit", dict(epochs=1)),
    "fedavg-scratch": ("fedavg-scratch", dict(epochs=1)),
    "local": ("local", dict(epochs=1)),
}
ROUNDS = 4


def vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)


def data() -> tuple[Any, Any]:
    full = synthetic_classification(n=90, num_classes=4, seed=0)
    return full.subset(range(60)), full.subset(range(60, 90))


def fingerprint(result: Any) -> dict[str, Any]:
    rows = [{k: row[k] for k in HISTORY_KEYS if k in row} for row in result.history.rows]
    digest = hashlib.sha256()
    for name, value in sorted(result.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.detach().contiguous().numpy().tobytes())
    return {"history": rows, "weights_sha256": digest.hexdigest()}


def run(pipeline: Any) -> dict[str, Any]:
    torch.set_num_threads(1)
    train, test = data()
    return fingerprint(pipeline.run(model=vit(), train=train, test=test, num_clients=3, rounds=ROUNDS, seed=0))


def main(out: str) -> None:  # how the reference file was made, from the multi-slot classes
    recorded = {}
    for key, (name, settings) in CONFIGS.items():
        recorded[key] = run(fedcore.Pipeline.from_config({"plugins": [dict(settings, name=name)]}))
    with open(out, "w") as f:
        json.dump(recorded, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
