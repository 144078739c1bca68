"""Entry point ``promptfl`` (group ``fedcore``): registers the method, its recipe and its baseline model. Imports
classes only.

The prompt substrate's own names (``prompt-share``, ``prompt-eval``, the ``prompted-clip`` model) are registered
by fedcore-clip.
"""
import fedcore
from fedcore_promptfl.method import PromptFL
from fedcore_promptfl.recipes import PROMPTFL


def clip_image_classifier_model(*, num_classes: int, arch: str = "fedcore-tiny-clip", pretrained=None,
                                init: str = "pretrained", seed: int = 0):
    """The image tower of an open_clip CLIP plus a linear head (the fine-tune / scratch baselines)."""
    from fedcore_clip import load_backbone
    from fedcore_promptfl.baselines import clip_image_classifier

    return clip_image_classifier(load_backbone(arch, pretrained=pretrained, seed=seed), num_classes, init=init,
                                 seed=seed)


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("promptfl", PromptFL)
    registry.add_model("clip-image-classifier", clip_image_classifier_model)
    registry.add_recipe("promptfl", PROMPTFL)
