"""The baselines' evaluation: the global model's test accuracy and loss, and its macro-F1.

Tables 4.2-4.3 report accuracy and macro-F1 for every method. ``prompt-eval`` records ``test_macro_f1`` for a
prompted CLIP; :class:`ClassifierEval` records the same key for any classifier (the fine-tune / scratch image
towers), with ``test_accuracy`` and ``test_loss`` computed exactly as the built-in ``global-eval`` does.
"""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.data import batches
from fedcore.settings import setting
from fedcore_clip import macro_f1


@attrs.frozen(eq=False, kw_only=True)
class ClassifierEval:
    """``test_accuracy``, ``test_loss`` and ``test_macro_f1`` of the global model; nothing without a test set."""

    batch_size: int = setting(512, low=1, help="evaluation batch size")

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Any, states: Any, ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        was_training = model.training
        model.eval()
        preds, targets, loss_sum, num_classes = [], [], 0.0, 0
        with torch.no_grad():
            for x, y in batches(dataset, range(len(dataset)), self.batch_size, shuffle=False):
                logits = model(x)
                loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
                preds.append(logits.argmax(-1))
                targets.append(y)
                num_classes = logits.shape[-1]
        model.train(was_training)
        if not targets:
            return {"test_accuracy": 0.0, "test_loss": 0.0, "test_macro_f1": 0.0}
        pred, target = torch.cat(preds), torch.cat(targets)
        n = len(target)
        return {"test_accuracy": int((pred == target).sum()) / n, "test_loss": loss_sum / n,
                "test_macro_f1": macro_f1(pred, target, num_classes)}
