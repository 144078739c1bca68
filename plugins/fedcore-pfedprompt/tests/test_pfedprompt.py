"""pFedPrompt and its baselines: contract checks, LFA unit tests, ledger proof, equivalences with PromptFL."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import fedcore
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore.engine.dispatch import apply_client_view
from fedcore.testing import parametrize_with_checks
from fedcore_clip import PromptEval, PromptShare, PromptUpdate, prompted_clip
from fedcore_clip.testing import PROMPT_FIXTURE, one_thread, shapes_data
from fedcore_clip.testing import tiny_backbone as backbone
from fedcore_pfedprompt import (
    MEMORY,
    PFedPromptEval,
    PromptAMP,
    PromptFLFineTune,
    PromptPer,
    PromptProx,
    build_memory,
    personal_logits,
)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def data(classes=6, n_train=6, n_test=3):
    return shapes_data(n_train, n_test, classes, stream="pf")


# PFedPromptEval() and PromptPer() with their defaults on this fixture: tests/test_registered_contracts.py (as declared)
@parametrize_with_checks([PFedPromptEval(buffer="prototype", affinity="tip", kind="prior"),
                          PromptFLFineTune(extra_epochs=1), PromptProx(epochs=1), PromptAMP()],
                         fixture=PROMPT_FIXTURE)
def test_contract(component, check):
    check(component)


def run(evaluate=None, update=None, rounds=2, seed=0, n_personal=0, aggregate=None, clients=3, fraction=1.0):
    train, test = data()
    model = prompted_clip(backbone(), train.classes, n_ctx=4, n_personal=n_personal)
    pipe = fedcore.Pipeline([FewShotPartition(shots=2, mode="disjoint"), UniformSync(fraction=fraction),
                             PromptShare(), update or PromptUpdate(lr=0.05, epochs=2),
                             aggregate or FedAvg(weighting="uniform"), evaluate or PromptEval()])
    return pipe.run(model=model, train=train, test=test, num_clients=clients, rounds=rounds, seed=seed), model


def same_history(a, b):
    ra, rb = a.history.comparable(), b.history.comparable()
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        for k in set(x) & set(y):
            assert x[k] == y[k], f"{k}: {x[k]} != {y[k]}"


BASE = []


def promptfl_run():
    if not BASE:
        BASE.append(run()[0])
    return BASE[0]


def test_pfedprompt_alpha_zero_equals_promptfl():
    same_history(run(evaluate=PFedPromptEval(alpha=0.0))[0], promptfl_run())


def test_promptprox_mu_zero_equals_promptfl():
    same_history(run(update=PromptProx(lr=0.05, epochs=2, mu=0.0))[0], promptfl_run())


def test_promptper_without_personal_context_equals_promptfl():
    same_history(run(evaluate=PromptPer(), n_personal=0)[0], promptfl_run())


def test_promptprox_mu_positive_changes_training():
    a = run(update=PromptProx(lr=0.05, epochs=2, mu=5.0))[0]
    assert a.history[-1]["train_loss"] != promptfl_run().history[-1]["train_loss"]


def test_lfa_memory_stays_on_the_client_the_ledger_proves_it():
    res, model = run(evaluate=PFedPromptEval(alpha=1.0))
    ctx_bytes = model.prompt.ctx.numel() * 4
    assert {(r.direction, r.kind) for r in res.ledger.rows} == {("up", "weights"), ("down", "weights")}
    assert res.ledger.total() == 2 * 3 * 2 * ctx_bytes  # rounds x clients x (down + up) x prompt
    for state in res.run.client_states.values():
        (m_k, m_v), = state.stash[MEMORY].values()
        assert m_k.shape == (4, 64)  # 2 shots x 2 classes, C = 64
    assert res.history[-1]["local_accuracy"] >= 0.0


def test_lfa_unit_properties():
    g = torch.Generator().manual_seed(0)
    keys = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    labels = torch.tensor([0, 0, 2, 2, 3, 3])
    full = build_memory(keys, labels, 5, "full")
    proto = build_memory(keys, labels, 5, "prototype")
    q = F.normalize(torch.randn(3, 8, generator=g), dim=-1)
    bonus = personal_logits(q, full)
    assert torch.all(bonus[:, [1, 4]] == 0), "non-local classes get no bonus"
    b = personal_logits(keys[2:3], full)
    assert torch.allclose(b[0, 2], 1 + keys[2] @ keys[3])
    one = build_memory(keys[[0, 2, 4]], labels[[0, 2, 4]], 5, "full")
    one_p = build_memory(keys[[0, 2, 4]], labels[[0, 2, 4]], 5, "prototype")
    assert torch.allclose(personal_logits(q, one), personal_logits(q, one_p), atol=1e-6), "N=1: full == prototype"
    assert proto[0].shape == (3, 8)
    prior = personal_logits(q, full, kind="prior")
    assert torch.equal(prior[0], torch.tensor([1.0, 0, 1, 1, 0]))
    tip = personal_logits(keys[:1], full, affinity="tip", beta=5.5)
    assert float(tip[0, 0]) == pytest.approx(1 + float(torch.exp(-5.5 * (1 - keys[0] @ keys[1]))), rel=1e-5)


def test_promptper_keeps_personal_context_on_the_client():
    res, model = run(evaluate=PromptPer(), n_personal=2)
    base_bytes = model.prompt.ctx.numel() * 4
    assert model.prompt.ctx.shape[0] == 2 and model.prompt.ctx_personal.shape[0] == 2
    assert res.ledger.total(direction="up") == 2 * 3 * base_bytes
    personal = [s.tensors["prompt.ctx_personal"] for s in res.run.client_states.values()]
    assert not torch.equal(personal[0], personal[1])
    assert not torch.equal(personal[0], model.prompt.ctx_personal)


def test_promptamp_sends_each_client_its_own_cloud_prompt():
    res, model = run(aggregate=PromptAMP(), evaluate=PFedPromptEval(alpha=0.0))
    views = res.run.server.client_views
    assert sorted(views) == [0, 1, 2]
    assert not torch.equal(views[0]["prompt.ctx"], views[1]["prompt.ctx"])
    share = PromptShare().fedcore_split_model(model=model, client=res.run.clients[1], state=res.run.client_states[1],
                                              ctx=type("C", (), {"run": res.run, "server": res.run.server})())
    apply_client_view(share, views[1])  # the engine applies a client's view to whatever share it is dispatched
    assert torch.equal(share.module.prompt.ctx.detach(), views[1]["prompt.ctx"])
    assert res.ledger.total(direction="down", round=1) == 3 * model.prompt.ctx.numel() * 4


def test_promptamp_weights():
    amp = PromptAMP(self_weight=0.5, sigma=0.0)
    table = {0: {"c": torch.tensor([1.0, 0.0])}, 1: {"c": torch.tensor([0.0, 1.0])}, 2: {"c": torch.tensor([1.0, 1.0])}}
    out = amp.cloud_prompts(table)
    assert torch.allclose(out[0]["c"], torch.tensor([0.75, 0.5]))


def test_promptfl_ft_fine_tunes_only_at_the_end():
    res, _ = run(evaluate=PromptFLFineTune(extra_epochs=5, lr=0.05))
    base = promptfl_run()
    assert res.history[0]["local_accuracy"] == base.history[0]["local_accuracy"]
    assert res.history[-1]["test_accuracy"] == base.history[-1]["test_accuracy"]  # global prompt untouched


def test_alpha_chosen_on_validation_rows_and_scored_on_the_held_out_rest():
    """Spec 003b A5: α is picked on a validation part of each client's test split, never on the scored part.

    In the disjoint setting a huge α turns the LFA bonus into a mask to the client's own classes, which the
    validation part must prefer; with a grid of α = 0 only, the selected score is the global prompt's."""
    grid = (0.0, 100.0)
    last = run(evaluate=PFedPromptEval(alpha=0.0, alpha_grid=grid, validation_fraction=0.5))[0].history[-1]
    assert last["alpha_selected"] == 100.0
    assert last["heldout_accuracy@selected"] > last["heldout_accuracy@alpha=0"]
    only_zero = run(evaluate=PFedPromptEval(alpha=0.0, alpha_grid=(0.0,), validation_fraction=0.5))[0].history[-1]
    assert only_zero["alpha_selected"] == 0.0
    assert only_zero["heldout_accuracy@selected"] == only_zero["heldout_accuracy@alpha=0"]
    assert only_zero["heldout_accuracy@alpha=0"] == last["heldout_accuracy@alpha=0"]  # the same rows either way
    oracle = run(evaluate=PFedPromptEval(alpha=0.0, alpha_grid=grid))[0].history[-1]
    assert "alpha_selected" not in oracle  # without a validation part nothing claims to be held out
