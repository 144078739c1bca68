"""pFedPrompt and its four adapted baselines as recipes: PromptFL's pipeline with one or two slots replaced.

Each is the pipeline of that method (few-shot disjoint partition, every client each round, prompt share, CoOp
update, uniform mean) by component names; ``plugins/fedcore-pfedprompt/repro/pfedprompt_sweep.toml`` runs them all:

* ``pfedprompt``: evaluate = ``pfedprompt`` (global prompt + local feature attention, Eq. 5.7);
* ``promptfl-ft``: evaluate = ``promptfl-ft`` (each client fine-tunes the global prompt, then evaluates);
* ``promptper``: evaluate = ``promptper``; the model needs personal context (``n_personal`` of ``open_clip``);
* ``promptprox``: local_update = ``promptprox`` (CE + mu/2 ||P - P_g||^2);
* ``promptamp``: aggregate = ``promptamp`` (per-client cloud prompts), evaluate = ``personal-prompt-eval``.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe
from fedcore_clip.configs import LEARNING, LEARNING_SETUP, TEST_SETUP
from fedcore_promptfl.recipes import PROMPTFL_SLOTS


def _promptfl_with(help: str, test_setup: dict[str, Any] | None = None, learning: dict[str, Any] | None = None,
                   **slots: Any) -> Recipe:
    return Recipe(slots={**PROMPTFL_SLOTS, **slots}, help=help, test_setup=test_setup or TEST_SETUP,
                  learning=learning or LEARNING)


_PERSONAL_LEARNING = {**LEARNING, "setup": {**LEARNING_SETUP, "model": {**LEARNING_SETUP["model"], "n_personal": 1}}}
"""PromptPer's learning check: the prompt recipes' (:data:`fedcore_clip.configs.LEARNING`) with the last of the 8
context vectors personal. The check scores the global prompt: the 7 shared vectors trained, the personal one as the
server initialised it (never trained); with 2 personal vectors that prompt reaches 47.5 % after 20 rounds."""


RECIPES = {
    "pfedprompt": _promptfl_with("pFedPrompt (Guo et al. 2023): PromptFL's shared prompt plus each client's local "
                                 "feature attention at evaluation", evaluate="pfedprompt"),
    "promptfl-ft": _promptfl_with("PromptFL+FT: PromptFL, then every client fine-tunes the global prompt locally",
                                  evaluate="promptfl-ft"),
    "promptper": _promptfl_with("PromptPer: FedPer on the prompt, personal context vectors stay on the client "
                                "(model: open_clip with n_personal > 0)", evaluate="promptper",
                                test_setup={**TEST_SETUP, "model": {**TEST_SETUP["model"], "n_personal": 2}},
                                learning=_PERSONAL_LEARNING),
    "promptprox": _promptfl_with("PromptProx: FedProx on the prompt, CE + mu/2 ||P - P_global||^2",
                                 local_update="promptprox",
                                 test_setup={**TEST_SETUP, "pipeline": {  # mu = 1 (the grid's largest): visible
                                     **TEST_SETUP["pipeline"], "local_update": {"epochs": 2, "lr": 0.05, "mu": 1.0}}}),
    "promptamp": _promptfl_with("PromptAMP: FedAMP on the prompt, a cloud prompt per client from similar clients",
                                aggregate="promptamp", evaluate="personal-prompt-eval"),
}
