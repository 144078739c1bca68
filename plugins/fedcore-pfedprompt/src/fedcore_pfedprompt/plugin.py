"""Entry point ``pfedprompt`` (group ``fedcore``): registers the method and its baselines. Imports classes only."""
import fedcore
from fedcore_pfedprompt.baselines import PromptAMP, PromptProx
from fedcore_pfedprompt.evaluators import PersonalPromptEval, PFedPromptEval, PromptFLFineTune, PromptPer


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("pfedprompt", PFedPromptEval)
    registry.add("promptfl-ft", PromptFLFineTune)
    registry.add("promptper", PromptPer)
    registry.add("promptprox", PromptProx)
    registry.add("promptamp", PromptAMP)
    registry.add("personal-prompt-eval", PersonalPromptEval)
