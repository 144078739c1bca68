"""``personal-eval``: score each client's own model, on its own test split when the partition gives one.

A client's model is the global model with its personal entries loaded over it (:func:`personal_copy`): its head
(FedPer, FedRep), its BatchNorm layers (FedBN), its whole personal model (Ditto), or the global model itself for a
method that keeps nothing (FedAvg scored the same way, for a paired comparison).

* On each client's **own test split** (``Partition.test[c]``: ``fewshot``, or ``paired-test`` of fedcore-fedv, which
  deals the test set out with each client's training label distribution): ``personal_accuracy`` (the mean over
  clients), ``personal_accuracy_min`` (the worst client), ``personal_accuracy_std`` (the spread over clients: the
  fairness view of q-FFL) and ``personal_loss``.
* On the **server's whole test set** (``server_test = true``, the default; SA-FedLoRA's FedPer/Local reading):
  ``test_accuracy`` (mean over clients), ``test_accuracy_min``, ``test_loss`` and ``test_accuracy_local``, each
  class weighted by the client's training label distribution (its expected accuracy on data like its own).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

import fedcore
from fedcore.data import batches, labels_of
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState
from fedcore_personal.overlay import personal_copy


def predictions(net: nn.Module, dataset: Any, indices: Sequence[int], batch_size: int
                ) -> tuple[np.ndarray, float, np.ndarray]:
    """Predicted labels, the summed cross-entropy and the per-sample cross-entropy of ``net`` on ``indices``."""
    preds, per_sample, loss_sum = [], [], 0.0
    net.eval()
    with torch.no_grad():
        for x, y in batches(dataset, indices, batch_size, shuffle=False):
            logits = net(x)
            loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            per_sample.append(nn.functional.cross_entropy(logits, y, reduction="none").double())
            preds.append(logits.argmax(-1))
    return torch.cat(preds).cpu().numpy(), loss_sum, torch.cat(per_sample).cpu().numpy()


def personal_evaluate(model: nn.Module, dataset: Any, clients: Sequence[ClientInfo], states: Mapping[int, Any],
                      ctx: Any, batch_size: int = 512, server_test: bool = True) -> dict[str, float]:
    """The metrics of the module docstring for every client's personal model."""
    if dataset is None:
        return {}
    run = ctx.run if ctx is not None else None
    splits = run.partition.test if run is not None and run.partition is not None else None
    test_labels = labels_of(dataset)
    classes = np.unique(test_labels)
    train_labels = labels_of(run.train) if run is not None and server_test else None
    accs, locals_, losses, own_accs, own_losses = [], [], [], [], []
    for client in clients:
        net = personal_copy(model, states.get(client.id))
        own = list(splits[client.id]) if splits is not None else []
        if server_test:
            pred, loss_sum, per_sample = predictions(net, dataset, range(len(dataset)), batch_size)
            correct = pred == test_labels
            accs.append(float(correct.mean()))
            losses.append(loss_sum / len(dataset))
            if train_labels is not None and run is not None:
                mine = train_labels[list(run.partition.train[client.id])]
                share = np.array([(mine == c).mean() for c in classes])
                per_class = np.array([correct[test_labels == c].mean() for c in classes])
                locals_.append(float((share * per_class).sum()))
            if own:
                own_accs.append(float(correct[own].mean()))
                own_losses.append(float(per_sample[own].mean()))
        elif own:
            pred, _, per_sample = predictions(net, dataset, own, batch_size)
            own_accs.append(float((pred == test_labels[own]).mean()))
            own_losses.append(float(per_sample.mean()))
    out: dict[str, float] = {}
    if accs:
        out.update(test_accuracy=float(np.mean(accs)), test_loss=float(np.mean(losses)),
                   test_accuracy_min=float(np.min(accs)))
    if locals_:
        out["test_accuracy_local"] = float(np.mean(locals_))
    if own_accs:
        out.update(personal_accuracy=float(np.mean(own_accs)), personal_accuracy_min=float(np.min(own_accs)),
                   personal_accuracy_std=float(np.std(own_accs)), personal_loss=float(np.mean(own_losses)))
    return out


@attrs.frozen(eq=False, kw_only=True)
class PersonalEval:
    """Each client's own model (global + its personal entries) on its own test split, and on the server's test set."""

    batch_size: int = setting(512, low=1)
    server_test: bool = setting(True, help="also score every client's model on the whole server test set "
                                           "(test_accuracy, test_accuracy_local)")

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: fedcore.RoundContext) -> dict[str, float]:
        return personal_evaluate(model, dataset, clients, states, ctx, self.batch_size, self.server_test)
