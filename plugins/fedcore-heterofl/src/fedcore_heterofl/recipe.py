"""The ``heterofl`` recipe: nested prefix width-submodels, trained locally and merged element by element.

A client of width ratio β always trains the first ``ceil(βK)`` heads and MLP hidden units of every block
(``submodel-share`` with ``rule = "prefix"``), so smaller submodels nest inside larger ones; the server
averages each element over the clients that trained it (``masked-delta``, uniform weights).
"""
from typing import Any

from fedcore import Recipe

MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 32, "depth": 2, "num_heads": 4}}
"""The smallest run (recipe matrix, smoke tests): a ViT with 4 heads, so the widths 1, 1/2, 1/4 all keep a head."""

HETEROFL = Recipe(
    slots={"split": {"name": "submodel-share", "rule": "prefix"}, "local_update": "submodel-train",
           "aggregate": {"name": "masked-delta", "weighting": "uniform"}},
    help="HeteroFL: nested prefix width-submodels per client budget, element-wise averaged (Diao et al. 2021)",
    test_setup=MICRO_VIT)
