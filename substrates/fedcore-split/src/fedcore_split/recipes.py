"""The split-learning baselines as recipes of single-slot components (each slot replaceable)."""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 32, "depth": 2, "num_heads": 2}}
"""The smallest run of a split recipe (recipe matrix, smoke tests): a cut needs a ViT's named stages."""
LEARNING: dict[str, Any] = {"rounds": 20, "setup": {"pipeline": {"local_update": {"lr": 0.01},
                                                                 "split": {"server_lr": 0.01}}}}
"""The learning check's setup (``fedcore.experiment.learning``): Adam 1e-2 on both segments, 20 rounds (at 10
rounds of the 256-sample micro setup splitfed-v1 stays at the majority class)."""
SL_LEARNING: dict[str, Any] = {"rounds": 20, "setup": {"pipeline": {"local_update": {"lr": 0.01, "batch_size": 8},
                                                                    "split": {"server_lr": 0.01}}}}
"""Vanilla SL's learning check: a round is one client's turn (a quarter of the micro data), so 20 rounds are 5
passes over the data; batches of 8 give a turn two steps (100 % after 20 rounds; it stays above 84 % from round 9
to 40, the count checked until issue 30). At 10 rounds of
one 16-sample batch (10 steps in all) it stays at chance; its wiring is exactly centralised SGD
(``test_vanilla_sl_with_sgd_is_centralised_sgd_in_turn_order``)."""

RECIPES = {
    "sl": Recipe(slots={"split": "split-share", "local_update": "split-train", "aggregate": "fedavg",
                        "schedule": "sl-turns"},
                 help="vanilla split learning: clients take turns, segments relayed, server stepped per batch",
                 test_setup=MICRO_VIT, learning=SL_LEARNING),
    "splitfed-v1": Recipe(slots={"split": {"name": "split-share", "server_update": "copies"},
                                 "local_update": "split-train", "aggregate": "fedavg", "schedule": "uniform"},
                          help="SplitFed V1 (Thapa et al. 2022): parallel clients, a server copy each, averaged",
                          test_setup=MICRO_VIT, learning=LEARNING),
    "splitfed-v2": Recipe(slots={"split": {"name": "split-share", "server_update": "sequential"},
                                 "local_update": "split-train", "aggregate": "fedavg", "schedule": "uniform"},
                          help="SplitFed V2: parallel clients, one server segment stepped per batch in client order",
                          test_setup=MICRO_VIT, learning=LEARNING),
}
