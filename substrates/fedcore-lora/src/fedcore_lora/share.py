"""Shares in which only a named subset of the model is trained, downloaded and uploaded.

``subset_share`` is the generic piece (LoRA factors, BitFit biases, a prompt, a head): the client's
working copy trains exactly the entries the share names, and only they cross the network, so the
ledger counts exactly those bytes. The frozen rest is not copied per client: every working copy reads
the global model's frozen parameters (the backbone), as PromptFL's clients read one frozen CLIP.
``LoRAShare`` is the component for a global model that already carries peft adapters (see
:func:`fedcore_lora.inject_lora`): adapters + an optional extra pattern.
"""
from __future__ import annotations

from collections.abc import Iterable
import re
from typing import Any, ClassVar

import attrs
from torch import nn

import fedcore
from fedcore.builtin import share_frozen_copy
from fedcore.errors import ConfigError
from fedcore.models import model_lora
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.types import ClientInfo, Share
from fedcore_lora.adapters import (
    ADAPTER,
    DEFAULT_TARGETS,
    check_rank,
    current_rank,
    has_lora,
    inject_lora,
)
from fedcore_lora.model_lora import resolve_lora


def matching_keys(model: nn.Module, pattern: str | None, *, setting: str = "pattern",
                  keys: Iterable[str] | None = None) -> list[str]:
    """``state_dict`` names (or ``keys``) matching ``pattern`` (``re.search``); an empty list for ``None`` or ``""``."""
    if not pattern:
        return []
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{setting}={pattern!r} is not a valid regular expression: {exc}") from None
    return [k for k in (model.state_dict() if keys is None else keys) if regex.search(k)]


def state_entries(model: nn.Module) -> dict[str, bool]:
    """``state_dict`` names of ``model``, in ``state_dict`` order, each mapped to whether it is a parameter.

    One walk over the modules, no tensor touched: a share is cut for every client, and ``state_dict()`` (or
    several walks) per client was a visible part of a LoRA round.
    """
    out: dict[str, bool] = {}
    for prefix, m in model.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for n, p in m._parameters.items():
            if p is not None:
                out[dot + n] = True
        for n, b in m._buffers.items():
            if b is not None and n not in m._non_persistent_buffers_set:
                out[dot + n] = False
    return out


def subset_share(model: nn.Module, client_id: int, ctx: Any, trainable: Iterable[str], *,
                 download: Iterable[str] | None = None, meta: dict[str, Any] | None = None) -> Share:
    """A working copy of ``model`` whose parameters named in ``trainable`` (and no others) require grad.

    Downloads ``download`` (default: the trainable entries) and uploads the trainable entries.
    The engine applies a personalised download the aggregator left for this client (``client_views``).
    The copy shares the frozen parameters it neither trains nor downloads with ``model``
    (:func:`fedcore.builtin.share_frozen_copy`): every client of a wave reads the one frozen backbone.
    """
    return _subset_share(model, trainable, state_entries(model), download, meta)


def _subset_share(model: nn.Module, trainable: Iterable[str], entries: dict[str, bool],
                  download: Iterable[str] | None, meta: dict[str, Any] | None) -> Share:
    wanted = list(dict.fromkeys(trainable))
    unknown = sorted(set(wanted) - set(entries))
    if unknown:
        raise KeyError(f"trainable entries not in the model: {unknown[:6]}")
    up = tuple(wanted)
    down = tuple(dict.fromkeys(download)) if download is not None else up
    module = share_frozen_copy(model, own=[*up, *down])
    train = set(wanted)
    for name, p in module.named_parameters():
        if p.requires_grad != (name in train):  # never the shared ones: frozen in the model and not trained
            p.requires_grad_(name in train)
    return Share(module=module, download=down, upload=up, meta=dict(meta or {}))


def lora_share(model: nn.Module, client_id: int, ctx: Any, *, extra: str | None = r"^head\.",
               download_all: bool = False) -> Share:
    """The LoRA share: adapter factors + entries matching ``extra`` are trained and sent.

    ``download_all`` sends every entry once (the frozen backbone after a stage switch).
    """
    entries = state_entries(model)
    adapters = [k for k in entries if f".lora_A.{ADAPTER}." in k or f".lora_B.{ADAPTER}." in k]
    if not adapters:
        raise ValueError(f"the global {type(model).__name__} has no LoRA adapters: inject them at the stage "
                         f"switch (fedcore_lora.inject_lora, e.g. from fedcore_round_start) before sharing them")
    keys = adapters + [k for k in matching_keys(model, extra, setting="extra", keys=entries) if k not in adapters]
    keys = [k for k in keys if entries[k]]  # buffers never train
    download = list(entries) if download_all else None
    return _subset_share(model, keys, entries, download, {"lora_rank": _rank(model, adapters)})


def _rank(model: nn.Module, adapters: list[str]) -> int:
    """:func:`current_rank` from the adapted layers the keys name (no walk over the whole model)."""
    marker = f".lora_A.{ADAPTER}."
    layers: list[Any] = [model.get_submodule(k.split(marker)[0]) for k in adapters if marker in k]  # peft layers
    found = {int(layer.r[ADAPTER]) for layer in layers}
    return found.pop() if len(found) == 1 else current_rank(model)  # current_rank names what is wrong


@attrs.frozen(eq=False, kw_only=True)
class LoRAShare:
    """Send and train only the LoRA factors of the global model (+ entries matching ``extra``, the head by default).

    A global model without adapters gets them at run start (peft, seeded from the run's seed) when the model
    carries a ``[model.lora]`` table (its r, alpha, target_modules and dropout) or ``rank`` is set, so a config
    alone runs: ``[model.lora] r = 4`` with ``pipeline.split = "lora-share"``. The share's ``signature`` is
    ``"lora-r<rank>"``.
    """

    applies_model_lora: ClassVar[bool] = True  # it injects the adapters a model's [model.lora] asks for

    extra: str = setting(r"^head\.", help="regex of extra entries trained and sent with the adapters ('' = none)")
    rank: int | None = setting(None, kind=int, optional=True, low=1,
                               help="inject adapters of this rank at run start when the model has none (or give "
                                    "model.lora.r)")
    target_modules: str = setting(DEFAULT_TARGETS, help="regex over nn.Linear module names to adapt; "
                                                        "model.lora.target_modules replaces the default")
    init_std: float | None = setting(None, kind=float, optional=True, low=0.0, low_open=True,
                                     help="std of A at injection; None = 1/rank (peft 'gaussian')")

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
    def fedcore_run_start(self, run: fedcore.RunContext) -> None:
        model = run.server.model
        if has_lora(model):
            return
        if self.rank is None and model_lora(model) is None:
            raise ConfigError(f"lora-share: the global {type(model).__name__} has no LoRA adapters; give the model a "
                              f"[model.lora] table (r = 4, ...) or set LoRAShare.rank to inject them at run start, "
                              f"or inject them in Python (fedcore_lora.inject_lora)")
        lora = resolve_lora(model, rank=self.rank, rank_setting="LoRAShare.rank", target=self.target_modules,
                            target_setting="LoRAShare.target_modules")
        check_rank(model, list(lora.targets), lora.rank, setting="LoRAShare.rank")
        inject_lora(model, target=lora.targets, rank=lora.rank, init_std=self.init_std, alpha=lora.alpha,
                    dropout=lora.dropout, seed=derive_seed(run.seed, "lora-share", "lora-init"))

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: Any, ctx: fedcore.RoundContext) -> Share:
        share = lora_share(model, client.id, ctx, extra=self.extra)
        return attrs.evolve(share, signature=f"lora-r{current_rank(model)}")
