"""Entry point ``clip`` (group ``fedcore``): registers the prompt substrate's components and model. Imports classes only."""
import fedcore
from fedcore_clip.evaluate import PromptEval
from fedcore_clip.share import PromptShare


def prompted_clip_model(*, classnames, arch: str = "fedcore-tiny-clip", pretrained=None, seed: int = 0, **prompt):
    """A frozen open_clip CLIP with a CoOp prompt for ``classnames`` (any architecture, any pretrained tag)."""
    from fedcore_clip import load_backbone, prompted_clip

    return prompted_clip(load_backbone(arch, pretrained=pretrained, seed=seed), classnames, seed=seed, **prompt)


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("prompt-share", PromptShare)
    registry.add("prompt-eval", PromptEval)
    registry.add_model("prompted-clip", prompted_clip_model)
