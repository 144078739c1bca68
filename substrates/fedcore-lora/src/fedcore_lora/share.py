"""Shares in which only a named subset of the model is trained, downloaded and uploaded.

``subset_share`` is the generic piece (LoRA factors, BitFit biases, a prompt, a head): the client's
working copy trains exactly the entries the share names, and only they cross the network, so the
ledger counts exactly those bytes. ``LoRAShare`` is the component for a global model that already
carries peft adapters (see :func:`fedcore_lora.inject_lora`): adapters + an optional extra pattern.
"""
from __future__ import annotations

from collections.abc import Iterable
import copy
import re
from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import Share
from fedcore_lora.adapters import adapter_keys, current_rank, has_lora


def matching_keys(model: nn.Module, pattern: str | None, *, setting: str = "pattern") -> list[str]:
    """``state_dict`` names matching ``pattern`` (``re.search``); an empty list for ``None`` or ``""``."""
    if not pattern:
        return []
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{setting}={pattern!r} is not a valid regular expression: {exc}") from None
    return [k for k in model.state_dict() if regex.search(k)]


def subset_share(model: nn.Module, client_id: int, ctx: Any, trainable: Iterable[str], *,
                 download: Iterable[str] | None = None, meta: dict[str, Any] | None = None) -> Share:
    """A working copy of ``model`` whose parameters named in ``trainable`` (and no others) require grad.

    Downloads ``download`` (default: the trainable entries) and uploads the trainable entries.
    The engine applies a personalised download the aggregator left for this client (``client_views``).
    """
    module = copy.deepcopy(model)
    wanted = list(dict.fromkeys(trainable))
    params = dict(module.named_parameters())
    unknown = sorted(set(wanted) - set(module.state_dict()))
    if unknown:
        raise KeyError(f"trainable entries not in the model: {unknown[:6]}")
    for name, p in params.items():
        p.requires_grad_(name in wanted)
    up = tuple(k for k in wanted)
    down = tuple(dict.fromkeys(download)) if download is not None else up
    return Share(module=module, download=down, upload=up, meta=dict(meta or {}))


def lora_share(model: nn.Module, client_id: int, ctx: Any, *, extra: str | None = r"^head\.",
               download_all: bool = False) -> Share:
    """The LoRA share: adapter factors + entries matching ``extra`` are trained and sent.

    ``download_all`` sends every entry once (the frozen backbone after a stage switch).
    """
    if not has_lora(model):
        raise ValueError(f"the global {type(model).__name__} has no LoRA adapters: inject them at the stage "
                         f"switch (fedcore_lora.inject_lora, e.g. from fedcore_round_start) before sharing them")
    keys = adapter_keys(model) + [k for k in matching_keys(model, extra, setting="extra") if k not in adapter_keys(model)]
    params = dict(model.named_parameters())
    keys = [k for k in keys if k in params]  # buffers never train
    download = list(model.state_dict()) if download_all else None
    return subset_share(model, client_id, ctx, keys, download=download, meta={"lora_rank": current_rank(model)})


@attrs.frozen(eq=False, kw_only=True)
class LoRAShare:
    """Send and train only the LoRA factors of the global model (+ entries matching ``extra``, the head by default)."""

    extra: str = setting(r"^head\.", help="regex of extra entries trained and sent with the adapters ('' = none)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit
        from fedcore_lora import inject_lora

        def vit_with_lora() -> Any:
            model = tiny_vit()
            inject_lora(model, rank=2, seed=0)
            return model

        return CheckPlan(fixture=ContractFixture(model_factory=vit_with_lora))

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: Any, ctx: Any) -> Share:
        return lora_share(model, client.id, ctx, extra=self.extra)
