"""The ``vectorised-prompt`` cohort: every CoOp client ends where PromptUpdate takes it alone (1e-5, fp32): shared and
personal context, cosine learning rates of unequal support sets, FedProx; other updates run one by one."""
from __future__ import annotations

import logging

import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore_clip import PromptEval, PromptShare, PromptUpdate, VectorisedPromptCohort, prompted_clip
from fedcore_clip.testing import one_thread, shapes_data, tiny_backbone


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.seen[(ctx.round, client.id)] = ({k: v.clone() for k, v in update.tensors.items()}, dict(update.metrics))


@attrs.frozen(eq=False, kw_only=True)
class ProxPrompt(PromptUpdate):
    def proximal_mu(self):
        return 0.5


def run(cohort, update, n_personal=0, shots=2):
    train, test = shapes_data(6, 3, 6, stream="vec")
    uploads = Uploads()
    pipe = fedcore.Pipeline([FewShotPartition(shots=shots, mode="disjoint", classes_per_client=2), UniformSync(),
                             PromptShare(), update, FedAvg(weighting="uniform"), PromptEval(), cohort, uploads])
    result = pipe.run(model=prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=4, n_personal=n_personal),
                      train=train, test=test, num_clients=3, rounds=2, seed=4)
    return result, uploads.seen


@pytest.mark.parametrize("update, n_personal", [
    (PromptUpdate(lr=0.05, epochs=2, batch_size=3), 0),
    (PromptUpdate(lr=0.05, epochs=1, batch_size=2, warmup_epochs=1, schedule="cosine"), 2),
    (ProxPrompt(lr=0.05, epochs=2, batch_size=3, schedule="constant"), 0),
], ids=["cosine", "personal-warmup", "fedprox"])
def test_each_client_matches_prompt_update_alone(update, n_personal, caplog):
    one, alone = run("per-job", update, n_personal)
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        vec, together = run(VectorisedPromptCohort(), update, n_personal)
    assert not caplog.records  # vectorised: nothing fell back
    assert alone.keys() == together.keys() and len(alone) == 6
    for key, (tensors, metrics) in alone.items():
        for name, value in tensors.items():
            torch.testing.assert_close(together[key][0][name], value, rtol=0, atol=1e-5)
        assert together[key][1]["loss"] == pytest.approx(metrics["loss"], abs=1e-5)
    for a, b in zip(one.history.rows, vec.history.rows):
        assert b["test_accuracy"] == pytest.approx(a["test_accuracy"], abs=1e-5)


def test_feature_less_training_runs_one_by_one_and_says_so(caplog):
    update = PromptUpdate(lr=0.05, epochs=1, cache_features=False, augment_shift=1)
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        _, together = run(VectorisedPromptCohort(), update)
    _, alone = run("per-job", update)
    assert [r.getMessage() for r in caplog.records] == [
        "vectorised-prompt cohort: cache_features = false (augmented images are encoded per step); training one by one"]
    for key, (tensors, _) in alone.items():
        for name, value in tensors.items():
            assert torch.equal(together[key][0][name], value)
