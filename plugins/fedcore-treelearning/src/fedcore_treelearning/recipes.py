"""Tree Learning and its baselines and ablations as recipes (thesis §3.6.1, Fig. 3.4-3.5, Fig. 3.8).

| recipe | split | schedule |
|---|---|---|
| ``tree-learning`` | Alg. 2 per client | pipelined (delayed gradients) |
| ``tl-optimal-split`` | Alg. 2 per client | synchronous tree |
| ``tl-no-partition`` | common split, half the units | pipelined |
| ``sl-sync`` | common split | synchronous aggregation (all clients, one merged batch) |
| ``sl-round-robin`` | common split | one client at a time, client part relayed |
| ``tree-learning-vertical`` | Alg. 2, width strips | pipelined; every client holds every sample |
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

_COMMON = {"select": "all-data", "aggregate": "fedavg", "evaluate": "tl-eval", "schedule": "uniform"}
_VERTICAL_SETUP: dict[str, Any] = {"model": {"name": "micro-cnn", "width": 8}, "num_clients": 2}
LEARNING: dict[str, Any] = {"rounds": 10, "setup": {"pipeline": {"split": {"server_lr": 0.1}, "cohort": {"lr": 0.1}}}}
"""The learning check's setup (``fedcore.experiment.learning``): at the default SGD 0.01 the micro run needs ~20
rounds to clear chance + 10 points; at 0.1 ten rounds."""


def _recipe(share: dict[str, Any], cohort: dict[str, Any], help: str, **extra: Any) -> Recipe:
    return Recipe(slots={**_COMMON, "split": {"name": "tl-share", **share}, "cohort": {"name": "tl-cohort", **cohort},
                         **extra}, help=help, learning=LEARNING)


RECIPES = {
    "tree-learning": _recipe({}, {}, "Tree Learning (Guo, TMC 2023): per-client splits by branch and bound, "
                                     "tree aggregation, pipelined delayed-gradient clients"),
    "tl-optimal-split": _recipe({}, {"schedule": "sync"}, "TL ablation: optimal per-client splits, synchronous tree "
                                                          "(no delayed gradients)"),
    "tl-no-partition": _recipe({"partition": "uniform"}, {}, "TL ablation: pipelined clients on the SL baseline's "
                                                             "common split"),
    "sl-sync": _recipe({"partition": "uniform"}, {"schedule": "sync"}, "SL with synchronous aggregation: common split, "
                                                                       "every client's batch merged, clients wait"),
    "sl-round-robin": _recipe({"partition": "uniform", "relay": True}, {"schedule": "round-robin"},
                              "SL round-robin (Gupta & Raskar): common split, clients take turns, client part relayed"),
}
RECIPES["tree-learning-vertical"] = Recipe(
    slots={**RECIPES["tree-learning"].slots, "partition": "tl-vertical",
           "split": {"name": "tl-share", "mode": "vertical"}},
    help="Tree Learning on vertically split data: clients hold width strips of the same samples, labels on the server",
    test_setup=_VERTICAL_SETUP, learning=LEARNING)
