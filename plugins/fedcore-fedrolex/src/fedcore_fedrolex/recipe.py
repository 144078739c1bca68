"""The ``fedrolex`` recipe: rolling width-submodels, trained locally and merged element by element.

Round r, a client of width ratio β trains the heads and MLP hidden units ``{(r + j) mod K : j < ceil(βK)}``
of every block (``submodel-share`` with ``rule = "rolling"``); the server averages each element over the
clients that trained it (``masked-delta``, uniform weights). Every unit is trained equally often over K rounds.
"""
from typing import Any

from fedcore import Recipe

MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 32, "depth": 2, "num_heads": 4}}
"""The smallest run (recipe matrix, smoke tests): a ViT with 4 heads, so the widths 1, 1/2, 1/4 all keep a head."""

FEDROLEX = Recipe(
    slots={"split": {"name": "submodel-share", "rule": "rolling"}, "local_update": "submodel-train",
           "aggregate": {"name": "masked-delta", "weighting": "uniform"}},
    help="FedRolex: rolling width-submodels per client budget, element-wise averaged (Alam et al. 2022)",
    test_setup=MICRO_VIT, learning={"rounds": 12})
