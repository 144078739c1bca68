"""FedGKT as a recipe: ``edge-share`` + ``edge-kd-train`` + ``kd-server`` with ``loss="soft-kd"`` (CE + T^2
KL(edge || server), the paper's server loss) + ``kd-eval``, on ``kd.fedgkt`` (edge ResNet + bottleneck-ResNet
server). FedML's published runs switch server-side KD off: ``aggregate = { loss = "ce" }``."""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

_MICRO_DATA: dict[str, Any] = {"name": "kd.synth-patterns", "n": 48, "n_test": 16, "num_classes": 4, "size": 8}

_SETUP: dict[str, Any] = {"dataset": _MICRO_DATA, "num_clients": 3,
                          "model": {"name": "kd.fedgkt", "num_classes": 4, "image_size": 8, "width": 4,
                                    "server_layers": [1, 1, 1], "server_planes": [4, 4, 4]}}

LEARNING: dict[str, Any] = {
    "rounds": 8,
    "setup": {"dataset": {**_MICRO_DATA, "n": 240, "n_test": 96},
              "pipeline": {"local_update": {"lr": 3e-3, "augment": False}, "aggregate": {"lr": 3e-3}}}}
"""The learning check's setup: the micro data at 240 / 96 samples (16 test samples move accuracy in steps of 6
points), Adam 3e-3 (FedVKD's sweep), no edge augmentation (a flip can change an 8x8 glyph's class)."""

RECIPES = {
    "fedgkt": Recipe(slots={"split": "edge-share", "local_update": "edge-kd-train",
                            "aggregate": {"name": "kd-server", "loss": "soft-kd"}, "evaluate": "kd-eval"},
                     help="FedGKT: edge CNNs + a bottleneck-ResNet server trained on their features with soft KD; "
                          "server logits sent back as soft targets",
                     test_setup=_SETUP, learning=LEARNING),
}
