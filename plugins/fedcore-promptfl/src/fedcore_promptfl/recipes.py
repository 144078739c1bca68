"""PromptFL and its FedAvg baselines as recipes: the pipelines of :func:`fedcore_promptfl.promptfl_pipeline` and
:func:`fedcore_promptfl.finetune_pipeline` by component names.

    recipe = "promptfl"                          # TOML; any slot replaceable: [pipeline.aggregate] name = "median"
    fedcore.recipe("promptfl", local_update={"lr": 0.05})

``promptfl``: few-shot partition (disjoint classes, 2 shots), every client each round, the prompt share (only
``prompt.ctx`` moves), CoOp SGD of the context, the unweighted mean (Eq. 5.2) and the prompt evaluation.
``promptfl-finetune``: the same partition and schedule, the whole model shared, local SGD with momentum, the
sample-weighted mean and ``classifier-eval`` (accuracy and macro-F1); with ``model = { name =
"clip-image-classifier", init = "pretrained" | "scratch" }`` it is Tables 4.2-4.3's Finetune / Scratch.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe
from fedcore_clip.configs import LEARNING, LEARNING_SETUP, TEST_SETUP

PROMPTFL_SLOTS: dict[str, Any] = {
    "partition": {"name": "fewshot", "shots": 2, "mode": "disjoint", "classes_per_client": 2},
    "schedule": "uniform",
    "split": "prompt-share",
    "local_update": "promptfl",
    "aggregate": {"name": "fedavg", "weighting": "uniform"},
    "evaluate": "prompt-eval",
}
"""PromptFL's slots; the pFedPrompt and CaFPT recipes start from them and replace one or two."""

PROMPTFL = Recipe(slots=PROMPTFL_SLOTS, test_setup=TEST_SETUP, learning=LEARNING,
                  help="PromptFL (Guo et al. 2023): clients train a shared CoOp prompt on a frozen CLIP; uniform mean")

FINETUNE_SLOTS: dict[str, Any] = {
    "partition": dict(PROMPTFL_SLOTS["partition"]),
    "schedule": "uniform",
    "split": "whole-model",
    "local_update": {"name": "sgd", "lr": 0.01, "epochs": 5, "batch_size": 32, "optimizer": "sgd", "momentum": 0.9},
    "aggregate": "fedavg",
    "evaluate": "classifier-eval",
}

FINETUNE_LEARNING: dict[str, Any] = {"rounds": 5, "margin": 0.3, "control": True, "setup": {
    **LEARNING_SETUP, "model": {"name": "clip-image-classifier", "pretrained": "fedcore-shapes", "pretrain_steps": 200},
    "pipeline": {"partition": {"shots": 8}, "local_update": {"epochs": 5, "lr": 0.1}}}}
"""The fine-tune baseline's learning check: the prompt recipes' data (fedcore_clip.configs.LEARNING_SETUP; the head
does not read the class names) with the 200-step tiny CLIP's image tower and a fresh head, SGD 0.1 (at the
micro setup's 0.01 a head over unit-norm features barely moves: chance after 5 rounds), 5 rounds; the control is
the untrained classifier."""

FINETUNE = Recipe(slots=FINETUNE_SLOTS, test_setup={**TEST_SETUP, "model": {"name": "clip-image-classifier"}},
                  learning=FINETUNE_LEARNING,
                  help="PromptFL's baselines (Tables 4.2-4.3): FedAvg of a CLIP image tower + head on the same "
                       "few-shot partition (model clip-image-classifier, init = pretrained | scratch)")
