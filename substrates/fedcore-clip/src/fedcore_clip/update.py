"""PromptFL's local update: CoOp training of the context vectors, nothing else (Guo et al., Eq. 5.1)."""
from __future__ import annotations

from typing import Any

import attrs
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientData, ClientState, ClientUpdate, Share
from fedcore_clip.features import SUPPORT, cached_features, gather_images, gather_labels
from fedcore_clip.share import require_prompted
from fedcore_clip.training import train_prompt


def shift_augment(x: torch.Tensor, generator: torch.Generator, pad: int) -> torch.Tensor:
    """Random translation by up to ``pad`` pixels (pad-and-crop), one offset per image."""
    if pad <= 0:
        return x
    h, w = x.shape[-2:]
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    offs = torch.randint(0, 2 * pad + 1, (len(x), 2), generator=generator)
    return torch.stack([padded[i, :, a:a + h, b:b + w] for i, (a, b) in enumerate(offs.tolist())])


@attrs.frozen(eq=False, kw_only=True)
class PromptUpdate:
    """``epochs`` of SGD on the prompt's trainable context with CE over all classes (CoOp, as in PromptFL).

    Image features are encoded once and cached in the client's state when ``cache_features`` (no
    augmentation); with ``augment_shift > 0`` images are shifted and re-encoded every step.
    Personal context (PromptPer) is trained with the shared one and kept in ``state.tensors``.
    """

    lr: float = setting(0.001, low=0.0, help="SGD learning rate (thesis: 0.001); 0 with no warm-up leaves the "
                                             "prompt at its initialisation (the untrained-prompt control)")
    epochs: int = setting(5, low=1, help="local epochs E")
    batch_size: int = setting(32, low=1)
    momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(5e-4, low=0.0)
    schedule: str = setting("cosine", choices=("cosine", "constant"))
    warmup_epochs: int = setting(0, low=0, help="epochs at constant 1e-5 before the cosine (PromptFL code: 1)")
    cache_features: bool = setting(True, help="encode each image once (only faithful without augmentation)")
    augment_shift: int = setting(0, low=0, help="random shift in pixels (needs cache_features=False)")

    def __attrs_post_init__(self) -> None:
        if self.cache_features and self.augment_shift:
            raise ConfigError(f"{type(self).__name__}: cache_features=True with augment_shift={self.augment_shift}; "
                              f"cached features are only valid without augmentation (set cache_features=False)")

    def proximal_mu(self) -> float | None:
        return None

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan
        from fedcore_clip.testing import PROMPT_FIXTURE

        return CheckPlan(fixture=PROMPT_FIXTURE)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: Any, share: Share, data: ClientData, state: ClientState, ctx: Any
                             ) -> ClientUpdate:
        model = require_prompted(share.module, type(self).__name__)
        labels = gather_labels(data.dataset, data.indices, device=next(model.parameters()).device)
        if len(labels) and int(labels.max()) >= model.prompt.num_classes:
            raise ConfigError(f"client {client.id} has label {int(labels.max())} but the prompt has only "
                              f"{model.prompt.num_classes} class names")
        gen = ctx.rng("shuffle")
        feats, encode = None, None
        if self.cache_features:
            feats = cached_features(state.stash, model.backbone, data.dataset, data.indices)
        else:
            images = gather_images(data.dataset, data.indices)
            aug = ctx.rng("augment")

            def encode(pos: torch.Tensor) -> torch.Tensor:
                return model.backbone.encode_image(shift_augment(images[pos], aug, self.augment_shift))
        loss = train_prompt(model, feats, labels, epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                            momentum=self.momentum, weight_decay=self.weight_decay, schedule=self.schedule,
                            warmup_epochs=self.warmup_epochs, generator=gen, mu=self.proximal_mu(), encode=encode)
        state.stash[SUPPORT] = tuple(int(i) for i in data.indices)
        params = dict(model.named_parameters())
        for name in model.personal_names():
            state.tensors[name] = params[name].detach().clone()
        return ClientUpdate(client_id=client.id, tensors={k: params[k].detach().clone() for k in share.upload},
                            num_examples=len(data), metrics={"loss": loss})
