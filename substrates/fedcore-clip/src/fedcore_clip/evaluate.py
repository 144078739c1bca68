"""Evaluation of prompted CLIP: global accuracy on the server's test set and each client's local accuracy.

Local accuracy (spec 003b A1) is measured on the client's personal test split (``Partition.test``: the
test images of its classes), over the global label space and, separately, restricted to the client's
own classes; every client is evaluated, sampled or not (A10). Personalised methods subclass
:class:`PromptEval` and override :meth:`PromptEval.client_logits`; test features are encoded once and
cached in the run's stash.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

import fedcore
from fedcore.data import labels_of
from fedcore.types import ClientInfo, ClientState
from fedcore_clip.features import SUPPORT, cached_features, gather_labels
from fedcore_clip.learner import PromptedCLIP
from fedcore_clip.share import require_prompted


def macro_f1(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    """Macro-averaged F1 over the classes present in ``target``."""
    scores = []
    for c in torch.unique(target).tolist():
        tp = int(((pred == c) & (target == c)).sum())
        fp = int(((pred == c) & (target != c)).sum())
        fn = int(((pred != c) & (target == c)).sum())
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def client_classes(run: Any, client_id: int) -> list[int]:
    """The classes a client holds (labels of its pool, or of its training part)."""
    part = run.partition
    idx = (part.pool or part.train)[client_id]
    return sorted(set(labels_of(run.train)[list(idx)].tolist()))


def support_indices(run: Any, state: ClientState, client_id: int) -> tuple[int, ...]:
    """The samples a client's prompt was trained on (after data selection); its partition if it never trained."""
    chosen = state.stash.get(SUPPORT)
    return tuple(chosen) if chosen is not None else tuple(run.partition.train[client_id])


@attrs.frozen(eq=False, kw_only=True)
class PromptEval:
    """Global accuracy/F1 of the global prompt, and mean/min/std of the clients' local accuracies."""

    def client_logits(self, model: PromptedCLIP, client: ClientInfo, state: ClientState, features: torch.Tensor,
                      text: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Client ``client``'s logits on its test features; the default is the global prompt's."""
        return model.logits_from_features(features, text)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan
        from fedcore_clip.testing import PROMPT_FIXTURE

        return CheckPlan(fixture=PROMPT_FIXTURE)

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        model = require_prompted(model, type(self).__name__)
        run = ctx.run
        all_idx = range(len(dataset))
        feats = cached_features(run.stash, model.backbone, dataset, all_idx, tag="test")
        labels = gather_labels(dataset, all_idx, device=feats.device)
        with torch.no_grad():
            text = model.text_features()
            logits = model.logits_from_features(feats, text)
        pred = logits.argmax(-1)
        out = {"test_accuracy": float((pred == labels).float().mean()),
               "test_macro_f1": macro_f1(pred, labels, model.prompt.num_classes),
               "test_loss": float(nn.functional.cross_entropy(logits, labels))}
        part = run.partition
        if part is None or part.test is None:
            return out
        per_client: dict[int, dict[str, float]] = {}
        for client in clients:
            idx = list(part.test[client.id])
            if not idx:
                continue
            with torch.no_grad():
                lg = self.client_logits(model, client, states[client.id], feats[idx], text, ctx).detach()
            y = labels[idx]
            mine = client_classes(run, client.id)
            mask = torch.full((lg.shape[1],), float("-inf"), device=lg.device)
            mask[mine] = 0.0
            per_client[client.id] = {
                "acc": float((lg.argmax(-1) == y).float().mean()),
                "acc_local_space": float(((lg + mask).argmax(-1) == y).float().mean()),
            }
        if per_client:
            accs = np.array([v["acc"] for v in per_client.values()])
            out.update({
                "local_accuracy": float(accs.mean()), "local_accuracy_std": float(accs.std()),
                "local_accuracy_min": float(accs.min()),
                "local_accuracy_local_space": float(np.mean([v["acc_local_space"] for v in per_client.values()])),
            })
        return out
