"""FedVKD and its FedAvg baselines as recipes of single-slot components.

``fedvkd``: ``edge-share`` + ``edge-kd-train`` (edge CE + beta T^2 KL to the server logits, Eq. 14/17) +
``kd-server`` with ``loss="hard-dist"`` (Eq. 13/15) + ``kd-eval``. The baselines train the composed global
models with FedAvg (Adam 1e-3, weight decay 1e-4, FedML's defaults): ``fedavg-vit`` (extractor + ViT, class
token only), ``fedavg-cnn`` (extractor + bottleneck ResNet, ResNet-113 at paper size), ``fedavg-edge`` (the
edge ResNet alone, Fig. 5).
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

MICRO_DATA: dict[str, Any] = {"name": "kd.synth-patterns", "n": 48, "n_test": 16, "num_classes": 4, "size": 8}
"""The smallest run (recipe matrix, smoke tests): 8x8 glyphs, 4 classes."""
_MICRO_MODEL = {"num_classes": 4, "image_size": 8, "width": 4}
_MICRO_VIT = {**_MICRO_MODEL, "embed_dim": 16, "depth": 1, "num_heads": 2}
_FEDAVG = {"split": "whole-model", "aggregate": "fedavg",
           "local_update": {"name": "sgd", "optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-4, "epochs": 1,
                            "batch_size": 64}}


def _setup(model: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": MICRO_DATA, "model": model, "num_clients": 3}


def _learning(rounds: int, lr: float) -> dict[str, Any]:
    """The learning check's setup: the micro data at 240 / 96 samples (16 test samples move accuracy in steps of 6
    points), ``rounds`` rounds of Adam at ``lr``."""
    return {"rounds": rounds, "setup": {"dataset": {**MICRO_DATA, "n": 240, "n_test": 96},
                                        "pipeline": {"local_update": {"lr": lr}}}}


FEDVKD_LEARNING: dict[str, Any] = {**_learning(12, 1e-2), "setup": {
    **_learning(12, 1e-2)["setup"],
    "pipeline": {"split": {"same_init": True}, "local_update": {"lr": 1e-2, "augment": False},
                 "aggregate": {"lr": 1e-2}}}}
"""FedVKD's learning check: every client's extractor from the same init (``same_init``, spec A18) and Adam 1e-2 on
both sides, no augmentation. Measured at seed 0, 12 rounds (issue 28): with independent inits and 3e-3 the server
ends at 32.6 % (chance 25 %); independent inits at 1e-2 at 39.9 %, rising only from round 9; the shared init at
1e-2 at 55.9 %, above 42 % from round 6. The spec's micro plan (16x16, 20 rounds, 1e-3) is several times the cost
of a learning case."""

RECIPES = {
    "fedvkd": Recipe(slots={"split": "edge-share", "local_update": "edge-kd-train",
                            "aggregate": {"name": "kd-server", "loss": "hard-dist"}, "evaluate": "kd-eval"},
                     help="FedVKD: edge CNNs + a hybrid-ViT server trained by DeiT hard distillation on their "
                          "features; server logits sent back as soft targets",
                     test_setup=_setup({"name": "kd.fedvkd", **_MICRO_VIT}),
                     learning=FEDVKD_LEARNING),
    "fedavg-vit": Recipe(slots=_FEDAVG, help="FedAvg of the composed hybrid ViT (edge extractor + ViT encoder)",
                         test_setup=_setup({"name": "kd.fedavg-vit", **_MICRO_VIT}), learning=_learning(8, 3e-3)),
    "fedavg-cnn": Recipe(slots=_FEDAVG, help="FedAvg of the composed CNN (edge extractor + bottleneck ResNet)",
                         test_setup=_setup({"name": "kd.fedavg-cnn", **_MICRO_MODEL, "server_layers": [1, 1, 1],
                                            "server_planes": [4, 4, 4]}), learning=_learning(12, 1e-2)),
    "fedavg-edge": Recipe(slots=_FEDAVG, help="FedAvg of the edge ResNet alone (FedVKD Fig. 5's baseline)",
                          test_setup=_setup({"name": "kd.edge", "num_classes": 4, "width": 4}),
                          learning=_learning(12, 1e-2)),
}
