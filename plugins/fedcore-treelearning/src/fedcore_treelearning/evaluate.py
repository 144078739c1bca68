"""``tl-eval``: test accuracy of the tree (thesis §3.6; spec A9.5).

Horizontal: every client has its own path (its personal units 1..split-1, then the server's units); the
metric is the mean test accuracy over the clients' paths (``test_accuracy``), with the worst path beside
it. Relayed client parts (SL round-robin) live in the global model, so every path is the global model.
Vertical: one tree; each client's part reads its strip of every test image and the merged map is classified.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.builtin import accuracy_and_loss, working_copy
from fedcore.data import batches
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState
from fedcore_treelearning.plan import plan_of
from fedcore_treelearning.tree import VERTICAL, merged_forward
from fedcore_treelearning.units import partition_units


def path_model(model: nn.Module, state: ClientState | None) -> nn.Module:
    """The global model with the client's personal units loaded (what the client's path computes)."""
    path = working_copy(model)
    if state is not None and state.tensors:
        own = {k: v for k, v in state.tensors.items() if k in path.state_dict()}
        path.load_state_dict(own, strict=False)
    return path


@attrs.frozen(eq=False, kw_only=True)
class TreeEval:
    """Evaluate slot: mean accuracy over client paths (horizontal) or of the whole tree (vertical)."""

    batch_size: int = setting(256, low=1)

    @classmethod
    def __fedcore_checks__(cls) -> Any:
        from fedcore_treelearning.checks import tree_check_plan
        return tree_check_plan(cls)

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: Any) -> dict[str, float]:
        if dataset is None:
            return {}
        if plan_of(ctx).mode == VERTICAL:
            return self._vertical(model, dataset, clients, states, ctx)
        accs, losses, seen = [], [], {}
        for c in sorted(clients, key=lambda c: c.id):
            state = states.get(c.id)
            key = tuple(sorted((k, id(v)) for k, v in (state.tensors.items() if state else ())))
            if key not in seen:
                seen[key] = accuracy_and_loss(path_model(model, state), dataset, batch_size=self.batch_size)
            acc, loss = seen[key]
            accs.append(acc)
            losses.append(loss)
        return {"test_accuracy": sum(accs) / len(accs), "test_loss": sum(losses) / len(losses),
                "test_accuracy_min": min(accs)}

    def _vertical(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                  states: Mapping[int, ClientState], ctx: Any) -> dict[str, float]:
        plan = plan_of(ctx)
        splits, bounds = plan.splits, plan.bounds
        ids = sorted(c.id for c in clients)
        if not splits or not bounds:
            return {}
        paths = {c: [u for _, u in partition_units(path_model(model, states.get(c)))] for c in ids}
        server = paths[ids[0]]
        correct, loss_sum, n = 0, 0.0, 0
        with torch.no_grad():
            for m in paths.values():
                for u in m:
                    u.eval()
            for x, y in batches(dataset, range(len(dataset)), self.batch_size, shuffle=False):
                inputs = {}
                for c in ids:
                    h = x[..., bounds[c][0]:bounds[c][1]]
                    for u in paths[c][:splits[c] - 1]:
                        h = u(h)
                    inputs[c] = h
                logits = merged_forward(server, splits, inputs, VERTICAL)
                loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(-1) == y).sum())
                n += len(y)
        return {"test_accuracy": correct / max(n, 1), "test_loss": loss_sum / max(n, 1)}
