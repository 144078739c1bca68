"""Entry point ``promptfl`` (group ``fedcore``): registers the method, its recipes, its baseline model and the
baselines' evaluation. Imports
classes only.

The prompt substrate's own names (``prompt-share``, ``prompt-eval``, the ``prompted-clip`` model) are registered
by fedcore-clip.
"""
import fedcore
from fedcore_promptfl.evaluate import ClassifierEval
from fedcore_promptfl.method import PromptFL
from fedcore_promptfl.recipes import FINETUNE, PROMPTFL


def clip_image_classifier_model(*, num_classes: int | None = None, arch: str = "fedcore-tiny-clip",
                                pretrained: str | None = None, init: str = "pretrained", seed: int = 0,
                                head_seed: int = 0, pretrain_steps: int = 1500, pretrain_seed: int = 0):
    """The image tower of an open_clip CLIP plus a linear head (the fine-tune / scratch baselines).

    ``pretrained`` as for ``prompted-clip`` (``fedcore-shapes`` is fedcore's pre-trained tiny CLIP); ``seed`` draws
    a random backbone's weights, ``head_seed`` the head and, with ``init = "scratch"``, the fresh tower (a config
    draws it from the run's seed); ``num_classes`` defaults to the data set's in a config."""
    from fedcore.errors import ConfigError
    from fedcore_clip.configs import load_clip
    from fedcore_promptfl.baselines import clip_image_classifier

    if not num_classes:
        raise ConfigError("clip-image-classifier needs num_classes (a config takes it from the data set)")
    backbone = load_clip(arch, pretrained, seed=seed, pretrain_steps=pretrain_steps, pretrain_seed=pretrain_seed,
                         model="clip-image-classifier")
    return clip_image_classifier(backbone, num_classes, init=init, seed=head_seed)


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("promptfl", PromptFL)
    registry.add("classifier-eval", ClassifierEval)
    registry.add_model("clip-image-classifier", clip_image_classifier_model)
    registry.add_recipe("promptfl", PROMPTFL)
    registry.add_recipe("promptfl-finetune", FINETUNE)
