"""Entry point ``pfedprompt`` (group ``fedcore``): registers the method, its baselines and their recipes.
Imports classes only."""
import fedcore
from fedcore_pfedprompt.baselines import PromptAMP, PromptProx
from fedcore_pfedprompt.evaluators import PersonalPromptEval, PFedPromptEval, PromptFLFineTune, PromptPer
from fedcore_pfedprompt.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("pfedprompt", PFedPromptEval)
    registry.add("promptfl-ft", PromptFLFineTune)
    registry.add("promptper", PromptPer)
    registry.add("promptprox", PromptProx)
    registry.add("promptamp", PromptAMP)
    registry.add("personal-prompt-eval", PersonalPromptEval)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
