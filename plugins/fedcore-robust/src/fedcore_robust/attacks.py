"""Seeded Byzantine clients, so that robustness can be measured: accuracy under f attackers.

``byzantine`` picks ``num_attackers`` of the N clients once per run from the run's own stream
(``run.np_rng("byzantine")``: the same seed picks the same clients, whatever the executor) and marks them in their
``ClientState`` (never sent; it travels with the client's job to any worker). Around whatever local update the
pipeline has, an attacker then replaces its honest change Δ = x − x_start by

* ``sign-flip``: −Δ·scale (scale 1 by default: the change reversed, as large as an honest one);
* ``scaled``:   +Δ·scale (scale 10 by default: a boosted update that drags a plain mean);
* ``label-flip``: nothing here; the ``label-flip-sgd`` local update trains the marked clients on labels
  ``y → C − 1 − y`` (its data is poisoned, its upload is an honest update on that data).

Only parameters are corrupted: BatchNorm running statistics are uploaded as trained (a negative variance would be
refused by the engine as a numerical fault, which measures nothing about the aggregator).
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any

import attrs
import torch

import fedcore
from fedcore import RunContext, StashKey
from fedcore.builtin import SGDUpdate
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.training import train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share

ATTACKER = StashKey[str]("robust.attacker")
"""In an attacker's ``ClientState.stash``: its attack (``sign-flip``, ``scaled`` or ``label-flip``)."""
ATTACKS = ("sign-flip", "scaled", "label-flip")
DEFAULT_SCALE = {"sign-flip": 1.0, "scaled": 10.0, "label-flip": 1.0}


def choose_attackers(run: RunContext, count: int) -> list[int]:
    """``count`` distinct client ids drawn from the run's ``byzantine`` stream (sorted)."""
    n = len(run.clients) or run.num_clients
    if count > n:
        raise ConfigError(f"byzantine.num_attackers={count} is more than the {n} clients")
    return sorted(int(c) for c in run.np_rng("byzantine").choice(n, size=count, replace=False))


@attrs.frozen(eq=False, kw_only=True)
class Byzantine:
    """``num_attackers`` seeded clients send a corrupted change (``sign-flip``, ``scaled``) or, with the
    ``label-flip-sgd`` local update, train on flipped labels (``label-flip``)."""

    attack: str = setting("sign-flip", choices=ATTACKS, help="what the attackers do")
    num_attackers: int = setting(1, low=0, help="f: how many of the clients attack (drawn once per run, seeded)")
    scale: float | None = setting(None, kind=float, low=0.0, low_open=True, optional=True,
                                  help="the attacker's change is ∓scale·Δ (default 1 for sign-flip, 10 for scaled)")

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        flips = isinstance(pipeline.provider("local_update"), LabelFlipSGD)
        if self.attack == "label-flip" and not flips:
            raise ConfigError("byzantine with attack='label-flip' poisons the data of its clients through the "
                              "label-flip-sgd local update; set local_update = \"label-flip-sgd\"")

    @fedcore.hookimpl
    def fedcore_run_start(self, run: RunContext) -> None:
        for c in choose_attackers(run, self.num_attackers):
            run.client_states[c].stash[ATTACKER] = self.attack

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: fedcore.RoundContext) -> dict[str, float]:
        return {"byzantine_clients": float(self.num_attackers)}

    @fedcore.hookimpl(wrapper=True)
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> Generator[None, ClientUpdate, ClientUpdate]:
        attack = state.stash.get(ATTACKER)
        if attack not in ("sign-flip", "scaled"):
            return (yield)
        buffers = {name for name, _ in share.module.named_buffers()}
        start = {k: v.detach().clone() for k, v in share.module.state_dict().items()
                 if k in share.upload and v.is_floating_point() and k not in buffers}
        update = yield
        scale = self.scale if self.scale is not None else DEFAULT_SCALE[attack]
        factor = -scale if attack == "sign-flip" else scale
        tensors = dict(update.tensors)
        for key, before in start.items():
            if key in tensors:
                tensors[key] = (before + factor * (tensors[key].detach() - before)).to(tensors[key].dtype)
        return attrs.evolve(update, tensors=tensors)


class FlippedLabels(torch.utils.data.Dataset):
    """A view of ``dataset`` whose labels are ``num_classes − 1 − y`` (inputs untouched, nothing copied)."""

    def __init__(self, dataset: Any, num_classes: int) -> None:
        self.dataset, self.num_classes = dataset, num_classes

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[Any, torch.Tensor]:
        x, y = self.dataset[i]
        return x, self.num_classes - 1 - torch.as_tensor(y)

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from fedcore.data import gather

        x, y = gather(self.dataset, indices)
        return x, self.num_classes - 1 - y


def num_classes_of(dataset: Any) -> int:
    classes = getattr(dataset, "classes", None)
    if classes:
        return len(classes)
    from fedcore.data import labels_of

    return int(labels_of(dataset).max()) + 1


@attrs.frozen(eq=False, kw_only=True)
class LabelFlipSGD(SGDUpdate):
    """The ``sgd`` local update, except that clients ``byzantine(attack='label-flip')`` marked train on labels
    ``y → C − 1 − y`` (a data-poisoning attacker; its update is honest SGD on the poisoned data)."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        if state.stash.get(ATTACKER) == "label-flip":
            data = ClientData(dataset=FlippedLabels(data.dataset, num_classes_of(data.dataset)), indices=data.indices)
        plan = SGDUpdate.vectorised_plan(self, share)
        loss = train_epochs(share.module, data, generator=ctx.rng("shuffle"), **plan.kwargs())
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss})

    def vectorised_plan(self, share: Share) -> None:  # type: ignore[override]
        """Not vectorised: an attacker trains on another view of the data, which one stacked loop cannot give it."""
        return None
