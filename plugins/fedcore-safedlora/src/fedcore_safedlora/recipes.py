"""The methods of this plugin as recipes of single-slot components (``recipe = "sa-fedlora"`` in TOML).

Each setting lives in exactly one component: the stage/rank plan in ``sa-fedlora-plan`` (an observer), the
head and the transition broadcast in ``sa-fedlora-share``, epochs, mu and the optimiser in the local update.
Replace any slot by name: ``fedcore.recipe("sa-fedlora", aggregate="trimmed-mean")``; change the plan's
settings by naming it again: ``fedcore.recipe("sa-fedlora", plugins=[{"name": "sa-fedlora-plan", "r_a": 4}])``.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

_LORA = {"split": "sa-fedlora-share", "local_update": "sa-fedlora-sgd", "aggregate": "staleness-mean"}
_FULL = {"split": "full-share", "local_update": "safedlora-sgd", "aggregate": "fedavg"}
_PERSONAL = {"local_update": "personal-sgd", "evaluate": "personal-eval"}  # personal-eval: fedcore-personal
MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 32, "depth": 2, "num_heads": 2}}
"""The smallest run of these recipes (recipe matrix): LoRA targets (qkv, proj, fc1, fc2) and a head need a ViT."""

_LEARNING: dict[str, Any] = {"rounds": 20, "setup": {"pipeline": {"local_update": {"lr": 0.05}}}}
"""The learning check's setup for the recipes that train a few tensors (BitFit's biases, fixed-rank LoRA): SGD 0.05
for 20 rounds (at 10 rounds of the 256-sample micro setup fedbit stays at the majority class); fixed-rank FedLoRA
is at 96.9 % after 8 (87.5-100 % from round 4 to 20), so it runs 8."""

RECIPES: dict[str, Recipe] = {
    "sa-fedlora": Recipe(slots=_LORA, plugins=("sa-fedlora-plan",), test_setup=MICRO_VIT,
                         help="SA-FedLoRA (Yang et al. 2024): proximal full-model stage, then LoRA, annealed rank"),
    "fedlora": Recipe(slots=_LORA, plugins=({"name": "sa-fedlora-plan", "t1_rounds": 0, "r_a": 0, "r_b": 0},),
                      test_setup=MICRO_VIT, learning={**_LEARNING, "rounds": 8},
                      help="fixed-rank FedLoRA (SA-FedLoRA ablation M1): LoRA factors at r = model.lora.r (8 if "
                           "not given) from round 0"),
    "fedfft": Recipe(slots=_FULL, test_setup=MICRO_VIT,
                     help="federated full fine-tuning of the given (pre-trained) model"),
    "fedavg-scratch": Recipe(slots=_FULL, plugins=("from-scratch",), test_setup=MICRO_VIT,
                             help="FedAvg from a seeded random re-initialisation"),
    "fedbit": Recipe(slots={**_FULL, "split": "bitfit-share"}, test_setup=MICRO_VIT,
                     learning=_LEARNING,
                     help="BitFit in FL: only biases and the head are trained and sent"),
    "fedper": Recipe(slots={"split": {"name": "fedper-share", "personal": r"^head\."}, "aggregate": "fedavg",
                            **_PERSONAL}, plugins=("from-scratch",),
                     test_setup=MICRO_VIT,
                     help="FedPer from scratch: personal head kept on each client, base layers averaged"),
    "local": Recipe(slots={"split": "local-share", "aggregate": "fedavg", **_PERSONAL}, test_setup=MICRO_VIT,
                    help="local training only: every client trains its own model, nothing is sent"),
}
