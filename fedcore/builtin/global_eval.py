"""Evaluation of the global model on the server's test set."""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.data.arrays import batches
from fedcore.settings import setting


def accuracy_and_loss(
    model: nn.Module, dataset: Any, indices: Any = None, batch_size: int = 512
) -> tuple[float, float]:
    """Top-1 accuracy and mean cross-entropy of ``model`` in eval mode (train mode is restored after)."""
    was_training = model.training
    model.eval()
    idx = range(len(dataset)) if indices is None else indices
    correct, loss_sum, n = 0, 0.0, 0
    with torch.no_grad():
        for x, y in batches(dataset, idx, batch_size, shuffle=False):
            logits = model(x)
            loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            n += len(y)
    model.train(was_training)
    return correct / max(n, 1), loss_sum / max(n, 1)


@attrs.frozen(eq=False, kw_only=True)
class GlobalEval:
    """``test_accuracy`` and ``test_loss`` of the global model; nothing when there is no test set."""

    batch_size: int = setting(512, low=1, help="evaluation batch size")

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Any, states: Any, ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        acc, loss = accuracy_and_loss(model, dataset, batch_size=self.batch_size)
        return {"test_accuracy": acc, "test_loss": loss}
