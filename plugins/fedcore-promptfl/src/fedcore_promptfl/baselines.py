"""The FedAvg baselines of Tables 4.2-4.3: the CLIP image tower plus a linear head, every parameter trained.

``init="pretrained"`` starts from the (frozen-elsewhere) CLIP's image tower (Finetune); ``init="scratch"``
from a freshly initialised tower of the same open_clip architecture (Scratch). They run on fedcore's
built-in FedAvg components (whole-model share, local SGD, sample-weighted mean) and ``classifier-eval``, so
their bytes on the ledger are the full tower + head every round.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from fedcore import Pipeline
from fedcore.builtin import FedAvg, FewShotPartition, SGDUpdate, UniformSync, WholeModel
from fedcore_clip import FrozenCLIP, ImagePrep, create_clip
from fedcore_promptfl.evaluate import ClassifierEval


class ImageTowerClassifier(nn.Module):
    """CLIP preprocessing, the image tower (trainable) and a linear head over the joint embedding."""

    def __init__(self, visual: nn.Module, prep: ImagePrep, embed_dim: int, num_classes: int, *, seed: int = 0) -> None:
        super().__init__()
        self.prep = prep
        self.visual = visual
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(nn.functional.normalize(self.visual(self.prep(x)), dim=-1))


def clip_image_classifier(backbone: FrozenCLIP, num_classes: int, *, init: str = "pretrained", seed: int = 0
                          ) -> ImageTowerClassifier:
    """The image tower of ``backbone`` (``init="pretrained"``) or a fresh one (``"scratch"``) plus a head."""
    if init == "pretrained":
        visual = copy.deepcopy(backbone.model.visual)
    elif init == "scratch":
        visual = create_clip(backbone.name, seed=seed + 1).visual
    else:
        raise ValueError(f"init={init!r}; choose 'pretrained' or 'scratch'")
    for p in visual.parameters():
        p.requires_grad_(True)
    prep = ImagePrep(backbone.prep.image_size, *backbone.prep.stats)
    return ImageTowerClassifier(visual, prep, backbone.embed_dim, num_classes, seed=seed).train()


def finetune_pipeline(*, shots: int = 2, mode: str = "disjoint", classes_per_client: int = 2, fraction: float = 1.0,
                      lr: float = 0.01, epochs: int = 5, batch_size: int = 32, optimizer: str = "sgd",
                      momentum: float = 0.9, extra: tuple[Any, ...] = ()) -> Pipeline:
    """FedAvg of the whole image classifier on the same few-shot partition as PromptFL (recipe
    ``promptfl-finetune``); evaluated with accuracy and macro-F1 (:class:`ClassifierEval`)."""
    return Pipeline([
        FewShotPartition(shots=shots, mode=mode, classes_per_client=classes_per_client),
        UniformSync(fraction=fraction), WholeModel(),
        SGDUpdate(lr=lr, epochs=epochs, batch_size=batch_size, optimizer=optimizer, momentum=momentum),
        FedAvg(), ClassifierEval(), *extra,
    ])
