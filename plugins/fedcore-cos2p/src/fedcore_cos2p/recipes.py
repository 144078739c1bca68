"""Co-S2P as recipes of single-slot components (``recipe = "co-s2p"`` in TOML).

``co-s2p`` is the paper's semi-asynchronous method (Alg. 1: wait for μN arrivals, then T_clk more
virtual seconds); ``co-s2p-async`` aggregates every arrival (μ = 1/N, T_clk = 0, the paper's
Co-S2P(Async.)); ``co-s2p-sync`` waits for every client (the synchronous ablation). Swap any slot by name:
``fedcore.recipe("co-s2p", schedule={"name": "semi-async", "mu": 0.75, "t_clk": 2.0})``.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

_SLOTS = {"split": "cos2p-share", "local_update": "cos2p-update", "aggregate": "cos2p-aggregate"}
MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 16, "depth": 4, "num_heads": 4}}
"""The smallest run of these recipes (recipe matrix): the share slices a timm ViT."""

# The learning check (fedcore.experiment.learning): a round's client trains a width window of the micro ViT, so the
# merged model needs about 20 rounds to clear chance + 10 points (5 clear it only when every arrival is merged).
RECIPES: dict[str, Recipe] = {
    "co-s2p": Recipe(slots={**_SLOTS, "schedule": {"name": "semi-async", "mu": 0.5, "t_clk": 0.0}},
                     test_setup=MICRO_VIT, learning={"rounds": 10},
                     help="Co-S2P (Li et al.): learned structured submodels on a rolling depth window, "
                          "self-distilled exits, semi-asynchronous Eq. 4/5 merge"),
    "co-s2p-async": Recipe(slots={**_SLOTS, "schedule": {"name": "semi-async", "arrivals": 1, "t_clk": 0.0}},
                           test_setup=MICRO_VIT,
                           help="Co-S2P(Async.): the same, aggregating every arrival (mu = 1/N, T_clk = 0)"),
    "co-s2p-sync": Recipe(slots={**_SLOTS, "schedule": {"name": "uniform", "fraction": 1.0}}, test_setup=MICRO_VIT,
                          learning={"rounds": 10},
                          help="Co-S2P with synchronous rounds (every client, wait for all): the ablation"),
}
