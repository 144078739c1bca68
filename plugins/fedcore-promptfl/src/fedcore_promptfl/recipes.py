"""PromptFL as a recipe: the pipeline of :func:`fedcore_promptfl.promptfl_pipeline` by component names.

    recipe = "promptfl"                          # TOML; any slot replaceable: [pipeline.aggregate] name = "median"
    fedcore.recipe("promptfl", local_update={"lr": 0.05})

Few-shot partition (disjoint classes, 2 shots), every client each round, the prompt share (only
``prompt.ctx`` moves), CoOp SGD of the context, the unweighted mean (Eq. 5.2) and the prompt evaluation.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe
from fedcore_clip.configs import TEST_SETUP

PROMPTFL_SLOTS: dict[str, Any] = {
    "partition": {"name": "fewshot", "shots": 2, "mode": "disjoint", "classes_per_client": 2},
    "schedule": "uniform",
    "split": "prompt-share",
    "local_update": "promptfl",
    "aggregate": {"name": "fedavg", "weighting": "uniform"},
    "evaluate": "prompt-eval",
}
"""PromptFL's slots; the pFedPrompt and CaFPT recipes start from them and replace one or two."""

PROMPTFL = Recipe(slots=PROMPTFL_SLOTS, test_setup=TEST_SETUP,
                  help="PromptFL (Guo et al. 2023): clients train a shared CoOp prompt on a frozen CLIP; uniform mean")
