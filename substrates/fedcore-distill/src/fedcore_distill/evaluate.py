"""Evaluate slot of a distillation run: every client's final model ``server o extractor_k`` and its edge model.

Server accuracy is the mean over clients of the top-1 of ``f_t(f_e^(k)(x))`` on the full test set (FedML's
protocol, spec A12), with the eval head the mean of the class and distillation heads (``eval_head``, A6); each
head's accuracy and the edge models' accuracy (Fig. 5) are reported too.

``count_eval_traffic`` (spec 002 Sec. 1.4): FedML has every client upload the features and labels of the full
test set each round, a simulation artefact the paper does not count (the default, ``False``). ``True`` books that
upload on the run's ledger (kinds ``eval_features`` and ``eval_labels``, round ``ctx.round``) and reports it as
``eval_bytes_up``.
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
from fedcore import Channel, RoundContext
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState
from fedcore_distill.edge import fetch
from fedcore_distill.share import EDGE_PREFIX, edge_of, require_kd_system

HEADS = ("mean", "cls", "dist")
"""Spec 002 A6: which server output counts, the mean of the class and distillation heads (DeiT's eval output) or
one of them (a server without a distillation token has one head: all three are equal)."""


def pick_head(cls_logits: torch.Tensor, dist_logits: torch.Tensor, head: str) -> torch.Tensor:
    """The logits of ``head`` (one of :data:`HEADS`)."""
    return {"mean": lambda: (cls_logits + dist_logits) / 2, "cls": lambda: cls_logits,
            "dist": lambda: dist_logits}[head]()


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
    eval_head: str = setting("mean", choices=HEADS, help="spec 002 A6: the server output test_accuracy and "
                                                         "test_loss score (cls_ and dist_accuracy are reported too)")
    count_eval_traffic: bool = setting(False, help="spec 002 Sec. 1.4: book every client's upload of the test "
                                                   "set's features and labels (FedML's evaluation) as traffic; "
                                                   "False = not communication (the paper's accounting)")

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
        eval_up = 0
        with torch.no_grad():
            for cid in trained:
                edge = edge_of(system, states[cid], cid, 0).eval()
                hits = dict.fromkeys(sums, 0.0)
                channel = Channel(cid, ctx.round) if self.count_eval_traffic and ctx.run is not None else None
                for chunk in ids.split(self.batch_size):
                    x, y = fetch(dataset, chunk)
                    z_edge, h = edge.forward_with_features(x)
                    if channel is not None:  # the client's upload of its test features (FedML's evaluation)
                        h, y = channel.up("eval_features", h), channel.up("eval_labels", y.long())
                    cls_logits, dist_logits = server_heads(server, h)
                    mean = pick_head(cls_logits, dist_logits, self.eval_head)
                    hits["test_accuracy"] += float((mean.argmax(-1) == y).sum())
                    hits["cls_accuracy"] += float((cls_logits.argmax(-1) == y).sum())
                    hits["dist_accuracy"] += float((dist_logits.argmax(-1) == y).sum())
                    hits["edge_accuracy"] += float((z_edge.argmax(-1) == y).sum())
                    hits["test_loss"] += float(F.cross_entropy(mean, y, reduction="sum"))
                if channel is not None and ctx.run is not None:
                    eval_up += sum(t.nbytes for t in ctx.run.ledger.book(channel))
                for k in sums:
                    sums[k] += hits[k] / len(ids)
                per_client.append(hits["test_accuracy"] / len(ids))
        out = {k: v / len(trained) for k, v in sums.items()}
        out["server_accuracy_best_client"] = max(per_client)
        if self.count_eval_traffic:
            out["eval_bytes_up"] = float(eval_up)
        return out


__all__ = ["KDEval", "server_heads"]
