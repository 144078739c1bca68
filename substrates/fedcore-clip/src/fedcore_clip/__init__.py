"""Prompt learning on a frozen open_clip CLIP, reusable by every prompt-based method (PromptFL, pFedPrompt, CaFPT).

* :mod:`backbone` -- :class:`FrozenCLIP` over any open_clip architecture (real pretrained tags or random
  weights; ``fedcore-tiny-clip`` is fedcore's micro architecture), :func:`load_backbone`.
* :mod:`learner` -- :class:`CoOpPromptLearner` (context length, class-token position, unified or
  class-specific context, text initialisation, optional personal part) and :class:`PromptedCLIP`.
* :mod:`features` -- frozen image features cached in a stash.
* :mod:`training` -- :func:`train_prompt`, CoOp's training loop.
* :mod:`share`, :mod:`update`, :mod:`evaluate` -- the pipeline components :class:`PromptShare`,
  :class:`PromptUpdate`, :class:`PromptEval`.
* :mod:`captioned`, :mod:`pretrain` -- captioned data and the tiny CLIP pre-trained by fedcore
  (``python -m fedcore_clip.pretrain``).

open_clip is imported only when a backbone is built.
"""
from fedcore_clip.backbone import (
    TINY,
    FrozenCLIP,
    ImagePrep,
    architectures,
    check_architecture,
    create_clip,
    load_backbone,
    parameter_counts,
)
from fedcore_clip.cohort import VectorisedPromptCohort
from fedcore_clip.evaluate import PromptEval, client_classes, macro_f1, support_indices
from fedcore_clip.features import FEATURES, SUPPORT, cached_features, encode_all, gather_images, gather_labels
from fedcore_clip.learner import CoOpPromptLearner, PromptedCLIP, prompted_clip
from fedcore_clip.share import PromptShare, require_prompted
from fedcore_clip.training import train_prompt
from fedcore_clip.update import PromptUpdate

__all__ = [
    "FEATURES", "SUPPORT", "TINY", "CoOpPromptLearner", "FrozenCLIP", "ImagePrep", "PromptEval", "PromptShare",
    "PromptUpdate", "PromptedCLIP", "architectures", "cached_features", "check_architecture", "client_classes",
    "create_clip", "encode_all", "gather_images",
    "gather_labels", "load_backbone", "macro_f1", "parameter_counts", "prompted_clip", "require_prompted",
    "support_indices", "train_prompt", "VectorisedPromptCohort",
]
