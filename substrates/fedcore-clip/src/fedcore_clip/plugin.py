"""Entry point ``clip`` (group ``fedcore``): registers the prompt substrate's components, model and data sets.
Imports classes and factories only."""
import fedcore
from fedcore_clip import configs
from fedcore_clip.cohort import VectorisedPromptCohort
from fedcore_clip.evaluate import PromptEval
from fedcore_clip.share import PromptShare


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("prompt-share", PromptShare)
    registry.add("prompt-eval", PromptEval)
    registry.add("vectorised-prompt", VectorisedPromptCohort)
    registry.add_model("open_clip", configs.prompted_clip_model)
    registry.add_model("prompted-clip", configs.deprecated_prompted_clip)  # the name before 0.1.1; goes in 1.0
    registry.add_dataset("clip.shapes", configs.shapes)
    registry.add_dataset("clip.digits", configs.digits)
