"""Personalised evaluation of split (and other personalised) models.

Client ``c``'s model is the global model with the client's own segment values
(``ClientState.tensors``, when newer than the last average it must receive) in place of the global
ones; it is scored on the client's personal test split (``Partition.test[c]``, e.g. from a paired
partition), as in FedV's protocol (App. 0.A.1). Without personal test splits every client is scored
on the whole test set. ``global_accuracy`` is the global model on the whole test set.
"""
from __future__ import annotations

import copy
from typing import Any

import attrs
import torch

import fedcore
from fedcore.builtin import accuracy_and_loss
from fedcore.settings import setting
from fedcore_split.state import personal_entries


@attrs.frozen(eq=False, kw_only=True)
class SplitEval:
    """``test_accuracy`` (sample-weighted over clients' personal test splits), its unweighted mean, and the global
    model's."""

    batch_size: int = setting(512, low=1)

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: Any, dataset: Any, clients: Any, states: Any, ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        g_acc, g_loss = accuracy_and_loss(model, dataset, batch_size=self.batch_size)
        out = {"global_accuracy": g_acc, "global_loss": g_loss}
        part = ctx.run.partition if ctx.run is not None else None
        tests = part.test if part is not None else None
        work = copy.deepcopy(model)
        base = {k: v.clone() for k, v in work.state_dict().items()}
        accs, correct, total, losses = [], 0.0, 0, 0.0
        for client in clients:
            own = personal_entries(states[client.id], ctx) if client.id in states else {}
            with torch.no_grad():
                work.load_state_dict({**base, **own})
            idx = tests[client.id] if tests is not None else range(len(dataset))
            if len(idx) == 0:
                continue
            acc, loss = accuracy_and_loss(work, dataset, idx, batch_size=self.batch_size)
            accs.append(acc)
            correct += acc * len(idx)
            losses += loss * len(idx)
            total += len(idx)
        if total:
            out.update(test_accuracy=correct / total, test_loss=losses / total,
                       test_accuracy_unweighted=sum(accs) / len(accs))
        return out
