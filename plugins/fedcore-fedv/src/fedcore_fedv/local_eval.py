"""Score each client's *local* model, as the FedV paper scores its FedAvg baseline.

A FedAvg run's history scores the global model on each client's paired test split. The paper instead
scores "each client's local model": the global model after that client's own local update. This
evaluator builds that model for every client (the same local training the update slot runs, from the
round's global model, on the client's training split, with a seeded per-client shuffle) and scores it
on the client's test split, so both readings of the FedAvg row can be reported side by side. It extends
``split-eval`` (the evaluate slot takes one component), so the history keeps the global model's numbers too.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.builtin import accuracy_and_loss
from fedcore.settings import setting
from fedcore.training import OPTIMIZERS, train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState
from fedcore_split import SplitEval


@attrs.frozen(eq=False, kw_only=True)
class LocalModelEval(SplitEval):
    """``split-eval``'s metrics plus ``local_model_accuracy``: each client's model after ``epochs`` of local
    training, on its own test split."""

    epochs: int = setting(5, low=1, help="local epochs, as in the run's update slot")
    lr: float = setting(1e-3, low=0.0, low_open=True)
    optimizer: str = setting("adam", choices=OPTIMIZERS)
    batch_size: int = setting(32, low=1)
    final_only: bool = setting(True, help="only at the last evaluation (local training per client is costly)")

    @fedcore.hookimpl
    def fedcore_evaluate(self, model: nn.Module, dataset: Any, clients: Sequence[ClientInfo],
                         states: Mapping[int, ClientState], ctx: fedcore.RoundContext) -> dict[str, float]:
        out = SplitEval.fedcore_evaluate(self, model, dataset, clients, states, ctx)
        run = ctx.run
        part = run.partition if run is not None else None
        if dataset is None or run is None or part is None or part.test is None:
            return out
        if self.final_only and ctx.round + 1 < run.rounds:
            return out
        accs, correct, total = [], 0.0, 0
        for client in clients:
            test_idx, train_idx = list(part.test[client.id]), part.train[client.id]
            if not test_idx or len(train_idx) == 0:
                continue
            own = copy.deepcopy(model)
            train_epochs(own, ClientData(dataset=run.train, indices=train_idx), epochs=self.epochs, lr=self.lr,
                         optimizer=self.optimizer, batch_size=self.batch_size,
                         generator=ctx.rng("local-model-eval", client.id))
            acc, _ = accuracy_and_loss(own, dataset, test_idx)
            accs.append(acc)
            correct += acc * len(test_idx)
            total += len(test_idx)
        if total:
            out.update(local_model_accuracy=correct / total, local_model_accuracy_unweighted=sum(accs) / len(accs))
        return out
