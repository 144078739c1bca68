"""LocalModelEval: the FedAvg row scored the paper's way, each client's model after its own local update."""
from __future__ import annotations

import copy

from fedcore import Pipeline, RoundContext
from fedcore.builtin import FedAvg, SGDUpdate, ShardPartition, UniformSync, WholeModel, accuracy_and_loss
from fedcore.testing import parametrize_with_checks, tiny_data
from fedcore.training import train_epochs
from fedcore.types import ClientData
from fedcore_fedv import LocalModelEval, PairedTest

from .test_fedv import FIXTURE, small_vit


@parametrize_with_checks([LocalModelEval(epochs=1, final_only=False)], fixture=FIXTURE)
def test_contract(component, check):
    check(component)


def run(evaluate):
    train, test = tiny_data(n=48, n_test=24)
    pipe = Pipeline([PairedTest(), ShardPartition(classes_per_client=2), UniformSync(), WholeModel(),
                     SGDUpdate(optimizer="adam", lr=1e-2, epochs=1, batch_size=8), FedAvg(), evaluate])
    return pipe.run(model=small_vit(), train=train, test=test, num_clients=3, rounds=2, seed=0)


def test_scores_each_clients_locally_trained_model_on_its_own_test_split():
    ev = LocalModelEval(epochs=2, lr=1e-2, batch_size=8)
    res = run(ev)
    assert "local_model_accuracy" not in res.history[0]  # final_only: only the last evaluation pays for it
    assert "test_accuracy" in res.history[0] and "test_accuracy" in res.history[-1]  # split-eval's own metrics kept
    got = res.history[-1]["local_model_accuracy"]
    # the same number by hand: each client trains a copy of the final global model on its split, scores its test
    run_ctx = res.run
    correct = total = 0.0
    ctx = RoundContext(run=run_ctx, seed=run_ctx.seed, round=1)
    for client in run_ctx.clients:
        own = copy.deepcopy(res.model)
        train_epochs(own, ClientData(dataset=run_ctx.train, indices=run_ctx.partition.train[client.id]), epochs=2,
                     lr=1e-2, optimizer="adam", batch_size=8, generator=ctx.rng("local-model-eval", client.id))
        idx = list(run_ctx.partition.test[client.id])
        acc, _ = accuracy_and_loss(own, run_ctx.test, idx)
        correct += acc * len(idx)
        total += len(idx)
    assert got == correct / total
    glob, _ = accuracy_and_loss(res.model, run_ctx.test)
    assert got != glob  # a different reading than the global model's
