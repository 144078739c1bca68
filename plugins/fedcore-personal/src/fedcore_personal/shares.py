"""Splits that keep part of the model on each client: FedPer/FedRep's head and FedBN's BatchNorm layers.

* ``fedper-share`` (FedPer, Arivazhagan et al., 2019; FedRep, Collins et al., 2021): the personal layers (by
  default the classifier head: timm's ``get_classifier()``, else the last ``nn.Linear``) stay on the client; the
  body is downloaded, trained and averaged.
* ``fedbn-share`` (FedBN, Li et al., ICLR 2021): every BatchNorm layer's affine parameters and running statistics
  stay on the client; everything else is averaged.

Both build the client's working copy from the global model with the client's own entries loaded over it
(:func:`fedcore_personal.overlay.personal_copy`), download and upload only the shared entries, and name the
personal ones in ``Share.meta["personal"]``. Something must store them after training (``keep-personal``, or a
local update with ``keeps_personal = True``): a pipeline without one is refused, since each round would start the
personal layers again from the never-updated global values.
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import attrs
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState, Share
from fedcore_personal.overlay import PERSONAL, keeps_personal, personal_copy


def classifier_head(model: nn.Module) -> str:
    """The module name of ``model``'s classifier: timm's ``get_classifier()`` when it has one, else the last Linear."""
    get = getattr(model, "get_classifier", None)
    head = get() if callable(get) else None
    names = {id(m): n for n, m in model.named_modules()}
    if isinstance(head, nn.Module) and id(head) in names and names[id(head)]:
        return names[id(head)]
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ConfigError(f"fedper-share finds no classifier head in this {type(model).__name__} (no nn.Linear); "
                          f"name the personal entries with personal = \"<regex>\"")
    return linears[-1]


def head_entries(model: nn.Module, pattern: str | None) -> list[str]:
    """State-dict names of the personal entries: those matching ``pattern``, or the classifier head's."""
    state = model.state_dict()
    if pattern is None:
        prefix = classifier_head(model) + "."
        return [k for k in state if k.startswith(prefix)]
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"FedPerShare.personal={pattern!r} is not a valid regular expression: {exc}") from None
    found = [k for k in state if regex.search(k)]
    if not found:
        raise ConfigError(f"FedPerShare.personal={pattern!r} matches no entry of this {type(model).__name__}")
    return found


def batchnorm_entries(model: nn.Module) -> list[str]:
    """State-dict names of every BatchNorm layer's entries (weight, bias, running statistics, counter)."""
    prefixes = [n + "." for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return [k for k in model.state_dict() if any(k.startswith(p) for p in prefixes)]


def personal_share(model: nn.Module, state: ClientState, personal: list[str]) -> Share:
    """The share of a split that keeps ``personal`` on the client."""
    mine = set(personal)
    module = personal_copy(model, state)
    entries = module.state_dict()
    shared = [k for k in entries if k not in mine]
    return Share(module=module, download=shared, upload=[k for k in shared if entries[k].is_floating_point()],
                 meta={PERSONAL: tuple(sorted(mine))})


class _NeedsKeeper:
    NAME: ClassVar[str] = "fedper-share"
    keeps_entries_local: ClassVar[bool] = True

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        if not any(keeps_personal(c) for c in pipeline.components):
            raise ConfigError(f"{self.NAME} keeps entries on each client, but nothing in the pipeline stores them "
                              f"after local training: add plugins = [\"keep-personal\"] (or use a local update "
                              f"that keeps them, e.g. personal-sgd)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CHECK_FIXTURE, CheckPlan
        from fedcore_personal.keep import KeepPersonal

        return CheckPlan(fixture=attrs.evolve(CHECK_FIXTURE, companions=[KeepPersonal()]))


@attrs.frozen(eq=False, kw_only=True)
class FedPerShare(_NeedsKeeper):
    """FedPer/FedRep: the personal layers (``personal``; default the classifier head) stay on each client, the body
    is shared and averaged."""

    personal: str | None = setting(None, kind=str, optional=True,
                                   help="regex of the personal entries (default: the model's classifier head)")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        return personal_share(model, state, head_entries(model, self.personal))


@attrs.frozen(eq=False, kw_only=True)
class FedBNShare(_NeedsKeeper):
    """FedBN (Li et al., 2021): BatchNorm layers (affine parameters and running statistics) stay local; the rest
    is averaged."""

    NAME: ClassVar[str] = "fedbn-share"

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        personal = batchnorm_entries(model)
        if not personal:
            raise ConfigError(f"fedbn-share keeps BatchNorm layers local; this {type(model).__name__} has none "
                              f"(use fedper-share, or a model with BatchNorm such as micro-cnn)")
        return personal_share(model, state, personal)
