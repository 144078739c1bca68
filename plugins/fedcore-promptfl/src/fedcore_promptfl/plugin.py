"""Entry point ``promptfl`` (group ``fedcore``): registers the components and models. Imports classes only."""
import fedcore
from fedcore.prompt import PromptEval, PromptShare
from fedcore_promptfl.method import PromptFL


def prompted_clip_model(*, classnames, arch: str = "fedcore-tiny-clip", pretrained=None, seed: int = 0, **prompt):
    """A frozen open_clip CLIP with a CoOp prompt for ``classnames`` (any architecture, any pretrained tag)."""
    from fedcore.prompt import load_backbone, prompted_clip

    return prompted_clip(load_backbone(arch, pretrained=pretrained, seed=seed), classnames, seed=seed, **prompt)


def clip_image_classifier_model(*, num_classes: int, arch: str = "fedcore-tiny-clip", pretrained=None,
                                init: str = "pretrained", seed: int = 0):
    """The image tower of an open_clip CLIP plus a linear head (the fine-tune / scratch baselines)."""
    from fedcore.prompt import load_backbone
    from fedcore_promptfl.baselines import clip_image_classifier

    return clip_image_classifier(load_backbone(arch, pretrained=pretrained, seed=seed), num_classes, init=init,
                                 seed=seed)


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("promptfl", PromptFL)
    registry.add("prompt-share", PromptShare)
    registry.add("prompt-eval", PromptEval)
    registry.add_model("prompted-clip", prompted_clip_model)
    registry.add_model("clip-image-classifier", clip_image_classifier_model)
