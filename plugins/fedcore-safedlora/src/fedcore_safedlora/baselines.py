"""The single-slot pieces of the paper's baselines (§4.1.3); the recipes in :mod:`fedcore_safedlora.recipes`
combine them with the same local trainer as SA-FedLoRA.

* ``full-share``     (FedFFT) full fine-tuning, every entry sent down, parameters up.
* ``from-scratch``   observer: a seeded re-initialisation of every weight before round 0 (FedAvg, FedPer).
* ``bitfit-share``   (FedBit) only biases (+ head) are trained and sent.
* ``fedper-share``   (FedPer) personal layers (the head by default) stay on the client and never cross the
                     network; ``personal-sgd`` keeps them in ``ClientState.tensors``.
* ``local-share``    (Local) each client trains its own model alone; nothing crosses the network.

FedPer and Local evaluate each client's personal model (``personal-eval``, :class:`PersonalEval`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

import fedcore
from fedcore.data import batches, labels_of
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_lora import matching_keys, subset_share
from fedcore_safedlora.training import Trainer


def reinitialise(model: nn.Module, seed: int) -> None:
    """Seeded fresh weights: timm's ``init_weights`` when the model has it, else every ``reset_parameters``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset) and module is not model:
                reset()
        init_weights = getattr(model, "init_weights", None)
        if callable(init_weights):
            init_weights()


@attrs.frozen(eq=False, kw_only=True)
class FromScratch:
    """Re-initialise the global model (seeded) before round 0: the paper's FedAvg and FedPer "from scratch"."""

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: fedcore.RoundContext) -> None:
        if ctx.round == 0:
            reinitialise(ctx.server.model, derive_seed(ctx.seed, "from-scratch-init"))


@attrs.frozen(eq=False, kw_only=True)
class FullShare:
    """Federated full fine-tuning (FedFFT): every parameter is trained, every entry sent down, parameters up."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        params = [n for n, _ in model.named_parameters()]
        return subset_share(model, client.id, ctx, params, download=list(model.state_dict()))


@attrs.frozen(eq=False, kw_only=True)
class BitFitShare:
    """FedBit (BitFit in FL): only bias vectors and the head are trained and communicated."""

    pattern: str = setting(r"\.bias$|^head\.", help="regex of the entries trained and sent")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        params = dict(model.named_parameters())
        keys = [k for k in matching_keys(model, self.pattern, setting="BitFitShare.pattern") if k in params]
        if not keys:
            raise fedcore.ConfigError(f"BitFitShare.pattern={self.pattern!r} matches no parameter of this "
                                      f"{type(model).__name__}")
        return subset_share(model, client.id, ctx, keys)


def _personal_copy(model: nn.Module, state: Any) -> nn.Module:
    module = copy.deepcopy(model)
    if state is not None and state.tensors:
        module.load_state_dict(state.tensors, strict=False)
    return module


def personal_evaluate(model: nn.Module, dataset: Any, clients: Sequence[Any], states: Mapping[int, Any], ctx: Any,
                      batch_size: int = 512) -> dict[str, float]:
    """Each client's personal model (global model + its ``ClientState.tensors``) on the server's test set.

    ``test_accuracy`` is the mean over clients on the whole test set; ``test_accuracy_local`` weights each
    class by the client's own training label distribution (its expected accuracy on its own data).
    """
    if dataset is None:
        return {}
    test_labels = labels_of(dataset)
    classes = np.unique(test_labels)
    train_labels = labels_of(ctx.run.train) if ctx.run is not None else None
    accs, locals_, losses = [], [], []
    for client in clients:
        net = _personal_copy(model, states.get(client.id))
        preds, loss_sum = [], 0.0
        net.eval()
        with torch.no_grad():
            for x, y in batches(dataset, range(len(dataset)), batch_size, shuffle=False):
                logits = net(x)
                loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
                preds.append(logits.argmax(-1))
        pred = torch.cat(preds).numpy()
        losses.append(loss_sum / len(dataset))
        correct = pred == test_labels
        accs.append(float(correct.mean()))
        if train_labels is not None:
            own = train_labels[list(ctx.run.partition.train[client.id])]
            share = np.array([(own == c).mean() for c in classes])
            per_class = np.array([correct[test_labels == c].mean() for c in classes])
            locals_.append(float((share * per_class).sum()))
    out = {"test_accuracy": float(np.mean(accs)), "test_loss": float(np.mean(losses)),
           "test_accuracy_min": float(np.min(accs))}
    if locals_:
        out["test_accuracy_local"] = float(np.mean(locals_))
    return out


@attrs.frozen(eq=False, kw_only=True)
class PersonalEval:
    """Evaluate every client's personal model (see :func:`personal_evaluate`) instead of the global model."""

    batch_size: int = setting(512, low=1)

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[Any], states: Mapping[int, Any],
                         ctx: Any) -> dict[str, float]:
        return personal_evaluate(model, dataset, clients, states, ctx, self.batch_size)


class _PersonalChecks:
    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit))  # personal entries: the ViT's head


@attrs.frozen(eq=False, kw_only=True)
class FedPerShare(_PersonalChecks):
    """FedPer: base layers are shared; personal layers (``personal``, the head) stay on each client.

    The share names the personal entries in ``meta["personal"]``; :class:`PersonalUpdate` keeps them.
    """

    personal: str = setting(r"^head\.", help="regex of the personal entries kept in ClientState.tensors")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        personal = set(matching_keys(model, self.personal, setting="FedPerShare.personal"))
        if not personal:
            raise fedcore.ConfigError(f"FedPerShare.personal={self.personal!r} matches no entry of this "
                                      f"{type(model).__name__}")
        shared = [n for n, _ in model.named_parameters() if n not in personal]
        share = subset_share(_personal_copy(model, state), client.id, ctx,
                             shared + [n for n, _ in model.named_parameters() if n in personal],
                             download=[k for k in model.state_dict() if k not in personal])
        return attrs.evolve(share, upload=tuple(shared), meta={"personal": tuple(sorted(personal))})


@attrs.frozen(eq=False, kw_only=True)
class LocalShare(_PersonalChecks):
    """Local training only: each client trains its own whole model; nothing crosses the network."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        share = subset_share(_personal_copy(model, state), client.id, ctx, [n for n, _ in model.named_parameters()],
                             download=[])
        return attrs.evolve(share, upload=(), meta={"personal": tuple(share.module.state_dict())})


@attrs.frozen(eq=False, kw_only=True)
class PersonalUpdate(Trainer):
    """Train ``epochs`` epochs, then keep the share's personal entries (``meta["personal"]``) on the client."""

    epochs: int = setting(2, low=1, help="local epochs per round")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        update = self.train(client, share, data, ctx, epochs=self.epochs)
        own = share.module.state_dict()
        state.tensors.update({k: own[k].detach().clone() for k in share.meta.get("personal", ())})
        return update
