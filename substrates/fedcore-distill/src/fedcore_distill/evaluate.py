"""Evaluate slot of a distillation run: every client's final model ``server o extractor_k`` and its edge model.

Server accuracy is the mean over clients of the top-1 of ``f_t(f_e^(k)(x))`` on the full test set (FedML's
protocol, spec A12), with the eval head the mean of the class and distillation heads; each head's accuracy and
the edge models' accuracy (Fig. 5) are reported too.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import sys
from typing import Any

import attrs
import torch
from torch import nn
import torch.nn.functional as F

import fedcore
from fedcore import RoundContext
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState
from fedcore_distill.edge import fetch
from fedcore_distill.share import EDGE_PREFIX, edge_of, require_kd_system


def server_heads(server: nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hybrid = sys.modules.get("fedcore_distill.hybrid_vit")  # not imported: the server is no HybridViT (nor timm)
    if hybrid is not None and isinstance(server, hybrid.HybridViT):
        return server.heads(h)
    out = server(h)
    return out, out


@attrs.frozen(eq=False, kw_only=True)
class KDEval:
    """Evaluate slot: server accuracy (mean over clients of server o extractor_k), per head, and edge accuracy."""

    batch_size: int = setting(256, low=1)

    @classmethod
    def __fedcore_checks__(cls):  # type: ignore[no-untyped-def]
        from fedcore_distill.checks import distill_check_plan

        return distill_check_plan(cls)

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: RoundContext) -> dict[str, float]:
        system = require_kd_system(model, "kd-eval")
        if dataset is None:
            return {}
        ids = torch.arange(len(dataset))
        trained = [c.id for c in clients if any(k.startswith(EDGE_PREFIX) for k in states[c.id].tensors)]
        if not trained:
            return {}
        server = system.server.eval()
        sums = {"test_accuracy": 0.0, "cls_accuracy": 0.0, "dist_accuracy": 0.0, "edge_accuracy": 0.0,
                "test_loss": 0.0}
        per_client = []
        with torch.no_grad():
            for cid in trained:
                edge = edge_of(system, states[cid], cid, 0).eval()
                hits = dict.fromkeys(sums, 0.0)
                for chunk in ids.split(self.batch_size):
                    x, y = fetch(dataset, chunk)
                    z_edge, h = edge.forward_with_features(x)
                    cls_logits, dist_logits = server_heads(server, h)
                    mean = (cls_logits + dist_logits) / 2
                    hits["test_accuracy"] += float((mean.argmax(-1) == y).sum())
                    hits["cls_accuracy"] += float((cls_logits.argmax(-1) == y).sum())
                    hits["dist_accuracy"] += float((dist_logits.argmax(-1) == y).sum())
                    hits["edge_accuracy"] += float((z_edge.argmax(-1) == y).sum())
                    hits["test_loss"] += float(F.cross_entropy(mean, y, reduction="sum"))
                for k in sums:
                    sums[k] += hits[k] / len(ids)
                per_client.append(hits["test_accuracy"] / len(ids))
        out = {k: v / len(trained) for k, v in sums.items()}
        out["server_accuracy_best_client"] = max(per_client)
        return out


__all__ = ["KDEval", "server_heads"]
