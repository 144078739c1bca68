"""Evaluation of the global model on the server's test set."""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.data.arrays import batches
from fedcore.runtime.workers import spread
from fedcore.settings import setting


def _hooked(model: nn.Module) -> bool:
    """Whether any module of ``model`` runs hooks in its forward (then its batches stay on the calling thread, in
    order: a hook may record what it sees)."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()) or bool(
        nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)


def accuracy_and_loss(
    model: nn.Module, dataset: Any, indices: Any = None, batch_size: int = 512
) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` in eval mode (train mode is restored after).

    The batches are fixed by ``batch_size`` alone and their losses summed in batch order, so the result is the
    same wherever they run: under the threads executor they are spread over its idle workers
    (:func:`fedcore.runtime.workers.spread`), else they run here one after another.
    """
    was_training = model.training
    model.eval()
    idx = range(len(dataset)) if indices is None else indices

    def outcome(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, int, int]:
        x, y = batch
        with torch.no_grad():  # grad mode is per thread: set here, where the batch runs
            logits = model(x)
            return (float(nn.functional.cross_entropy(logits, y, reduction="sum")),
                    int((logits.argmax(-1) == y).sum()), len(y))

    todo = list(batches(dataset, idx, batch_size, shuffle=False))
    try:
        done = [outcome(b) for b in todo] if _hooked(model) else spread(outcome, todo, what="evaluation")
    finally:
        model.train(was_training)
    correct, loss_sum, n = 0, 0.0, 0
    for loss, right, size in done:  # in batch order, as a running sum over the batches
        loss_sum += loss
        correct += right
        n += size
    return correct / max(n, 1), loss_sum / max(n, 1)


@attrs.frozen(eq=False, kw_only=True)
class GlobalEval:
    """``test_accuracy`` and ``test_loss`` of the global model; nothing when there is no test set."""

    batch_size: int = setting(128, low=1, help="evaluation batch size (the batches are spread over the threads "
                                              "executor's workers)")

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Any, states: Any, ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        acc, loss = accuracy_and_loss(model, dataset, batch_size=self.batch_size)
        return {"test_accuracy": acc, "test_loss": loss}
