"""Personalisation: what stays on the client, the update rules against their equations, the personal evaluation."""
import numpy as np
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, FewShotPartition, SGDUpdate, WholeModel, accuracy_and_loss
from fedcore.data import synthetic_classification
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.testing import CHECK_FIXTURE, run_tiny_pipeline, tiny_model
from fedcore.training import cross_entropy, train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState, Share
from fedcore_personal import (
    DittoUpdate,
    FedBNShare,
    FedPerShare,
    FedRepUpdate,
    KeepPersonal,
    PersonalEval,
    classifier_head,
    personal_copy,
)

BN = CHECK_FIXTURE   # the tiny MLP behind a BatchNorm2d


def test_the_classifier_head_is_found():
    assert classifier_head(tiny_model()) == "3"                                   # the MLP's last Linear
    assert classifier_head(micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)) == "head"   # timm's


def test_fedper_keeps_the_head_on_each_client():
    result = run_tiny_pipeline([FedPerShare(), KeepPersonal()], rounds=2)
    start, end = tiny_model().state_dict(), result.model.state_dict()
    assert torch.equal(end["3.weight"], start["3.weight"])             # the global head is never aggregated
    assert not torch.equal(end["1.weight"], start["1.weight"])         # the body is
    heads = [s.tensors["3.weight"] for s in result.run.client_states.values()]
    assert set(result.run.client_states[0].tensors) == {"3.weight", "3.bias"}
    assert not torch.equal(heads[0], heads[1])                         # each client has its own
    body_bytes = sum(v.numel() * 4 for k, v in start.items() if not k.startswith("3."))
    assert result.history.last("bytes_up") == 3 * body_bytes           # the head never crosses the network


def test_a_client_resumes_from_its_own_head():
    share = FedPerShare().fedcore_split_model(
        model=tiny_model(), client=ClientInfo(id=0, num_samples=1),
        state=ClientState(client_id=0, tensors={"3.bias": torch.full((4,), 7.0)}), ctx=None)
    assert torch.equal(share.module.state_dict()["3.bias"], torch.full((4,), 7.0))
    assert "3.bias" not in share.download and "3.bias" not in share.upload
    assert share.meta["personal"] == ("3.bias", "3.weight")


def test_a_personal_split_without_a_keeper_is_refused():
    with pytest.raises(ConfigError, match=r"fedper-share keeps entries on each client, but nothing .* add plugins = "
                                          r"\[\"keep-personal\"\]"):
        fedcore.Pipeline([FedPerShare()])
    with pytest.raises(ConfigError, match=r"fedbn-share keeps entries"):
        fedcore.Pipeline([FedBNShare()])
    with pytest.raises(ConfigError, match=r"ditto-sgd keeps a whole personal model .* FedPerShare"):
        fedcore.Pipeline([FedPerShare(), KeepPersonal(), DittoUpdate()])


def test_fedbn_keeps_batchnorm_local():
    result = run_tiny_pipeline([FedBNShare(), KeepPersonal()], rounds=2, fixture=BN)
    start, end = BN.model_factory().state_dict(), result.model.state_dict()
    for k in ("0.weight", "0.bias", "0.running_mean", "0.running_var"):
        assert torch.equal(end[k], start[k]), k                         # BatchNorm is never averaged
    assert not torch.equal(end["2.weight"], start["2.weight"])
    means = [s.tensors["0.running_mean"] for s in result.run.client_states.values()]
    assert not torch.equal(means[0], means[1])                          # each client its own statistics
    with pytest.raises(ConfigError, match=r"fedbn-share keeps BatchNorm layers local; this Sequential has none"):
        run_tiny_pipeline([FedBNShare(), KeepPersonal()], rounds=1)


class Ctx:
    """A client-side round context: ``rng(purpose)`` streams for seed 0, round 0, this client."""

    def __init__(self, client_id=0):
        self.ctx = fedcore.RoundContext(round=0, seed=0, client_id=client_id)

    def __getattr__(self, name):
        return getattr(self.ctx, name)


def job(state=None, n=8):
    data = synthetic_classification(n=n, num_classes=4, seed=1)
    model = tiny_model()
    share = FedPerShare().fedcore_split_model(model=model, client=ClientInfo(id=0, num_samples=n),
                                              state=state or ClientState(client_id=0), ctx=None)
    return share, ClientData(dataset=data, indices=range(n)), model


def test_fedrep_update_is_algorithm_1():
    # Collins et al. (2021), Alg. 1: h ← GD(f(φ^t, h), h) for τ_h epochs, then φ ← GD(f(φ, h), φ) for τ_φ epochs.
    share, data, _ = job()
    reference = personal_copy(share.module, None)
    head = {"3.weight", "3.bias"}
    for n, p in reference.named_parameters():
        p.requires_grad_(n in head)
    ctx = Ctx()
    train_epochs(reference, data, epochs=3, lr=0.1, batch_size=4, generator=ctx.rng("fedrep-head"))
    for n, p in reference.named_parameters():
        p.requires_grad_(n not in head)
    train_epochs(reference, data, epochs=1, lr=0.1, batch_size=4, generator=ctx.rng("shuffle"))
    update = FedRepUpdate(head_epochs=3, epochs=1, lr=0.1, batch_size=4).fedcore_local_update(
        client=ClientInfo(id=0, num_samples=8), share=share, data=data, state=ClientState(client_id=0), ctx=ctx)
    got, want = share.module.state_dict(), reference.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert set(update.tensors) == {"1.weight", "1.bias"}                # the body goes up, the head stays
    assert all(p.requires_grad for p in share.module.parameters())     # trainable flags restored


def test_fedrep_needs_a_personal_head():
    share, data, model = job()
    whole = Share(module=share.module, download=share.download, upload=share.upload)
    with pytest.raises(ConfigError, match=r"fedrep-sgd trains the share's personal head first"):
        FedRepUpdate().fedcore_local_update(client=ClientInfo(id=0, num_samples=8), share=whole, data=data,
                                            state=ClientState(client_id=0), ctx=Ctx())


def test_ditto_personal_step_is_the_papers_equation():
    # Li et al. (2021), Alg. 1: v ← v − η (∇F_k(v) + λ (v − w^t)). One full-batch step from v₀ ≠ w^t.
    data = ClientData(dataset=synthetic_classification(n=8, num_classes=4, seed=1), indices=range(8))
    w = tiny_model()
    v0 = {k: t + 0.05 for k, t in w.state_dict().items()}
    lam, lr = 0.5, 0.2
    v = tiny_model()
    v.load_state_dict(v0)
    x, y = data.dataset.x, data.dataset.y
    grads = torch.autograd.grad(cross_entropy(v, x, y), list(v.parameters()))
    expected = {n: (p - lr * (g + lam * (p - w.state_dict()[n]))).detach()
                for (n, p), g in zip(v.named_parameters(), grads)}
    state = ClientState(client_id=0, tensors={k: t.clone() for k, t in v0.items()})
    share = WholeModel().fedcore_split_model(model=w, client=ClientInfo(id=0, num_samples=8), state=state, ctx=None)
    DittoUpdate(lam=lam, personal_epochs=1, lr=lr, batch_size=8).fedcore_local_update(
        client=ClientInfo(id=0, num_samples=8), share=share, data=data, state=state, ctx=Ctx())
    for n, want in expected.items():
        assert torch.allclose(state.tensors[n], want, atol=1e-6), n


def test_dittos_global_model_is_fedavgs():
    plain = run_tiny_pipeline([SGDUpdate(lr=0.1)], rounds=2)
    ditto = run_tiny_pipeline([DittoUpdate(lr=0.1, lam=1.0)], rounds=2)
    a, b = plain.model.state_dict(), ditto.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    personal = ditto.run.client_states[0].tensors
    assert set(personal) == set(a) and not torch.equal(personal["1.weight"], a["1.weight"])


def test_ditto_with_a_huge_lambda_stays_at_the_global_model():
    result = run_tiny_pipeline([DittoUpdate(lam=1e6, lr=1e-7, personal_lr=1e-7)], rounds=1)
    start = tiny_model().state_dict()
    assert all(torch.allclose(result.run.client_states[0].tensors[k], start[k], atol=1e-5) for k in start)


def test_personal_eval_scores_each_client_on_its_own_split():
    # fewshot gives personal test splits (each client's classes); the global model of FedAvg scored per client
    run = run_tiny_pipeline([FewShotPartition(shots=4), FedAvg(), PersonalEval()], rounds=2)
    model, test = run.model, run.run.test
    accs = [accuracy_and_loss(model, test, list(run.run.partition.test[c]))[0] for c in range(3)]
    row = run.history.rows[-1]
    assert row["personal_accuracy"] == pytest.approx(np.mean(accs))
    assert row["personal_accuracy_min"] == pytest.approx(min(accs))
    assert row["personal_accuracy_std"] == pytest.approx(np.std(accs))
    full = accuracy_and_loss(model, test, range(len(test)))[0]
    assert row["test_accuracy"] == pytest.approx(full) and row["test_accuracy_min"] == pytest.approx(full)


def test_personal_eval_uses_each_clients_own_model():
    result = run_tiny_pipeline([FewShotPartition(shots=4), FedPerShare(), KeepPersonal(),
                                PersonalEval(server_test=False)], rounds=2)
    row = result.history.rows[-1]
    accs = []
    for c, state in result.run.client_states.items():
        net = personal_copy(result.model, state)
        accs.append(accuracy_and_loss(net, result.run.test, list(result.run.partition.test[c]))[0])
    assert row["personal_accuracy"] == pytest.approx(np.mean(accs))
    assert "test_accuracy" not in row                                      # server_test = false


def test_safedlora_reuses_these_components():
    pytest.importorskip("fedcore_safedlora")
    import fedcore_safedlora

    assert fedcore_safedlora.FedPerShare is FedPerShare and fedcore_safedlora.PersonalEval is PersonalEval
    pipe = fedcore.recipe("fedper")
    assert isinstance(pipe.provider("split"), FedPerShare) and isinstance(pipe.provider("evaluate"), PersonalEval)


def test_found_by_name_with_recipes():
    info = {p.name: p for p in fedcore.list_plugins()}
    if "personal" not in info:
        pytest.skip("fedcore-personal is not installed in this environment (run `bash scripts/dev env`)")
    assert {"fedper-share", "fedbn-share", "keep-personal", "fedrep-sgd", "ditto-sgd", "personal-eval",
            "recipe:fedrep", "recipe:fedbn", "recipe:ditto", "recipe:fedper-head"} <= set(info["personal"].components)
    pipe = fedcore.recipe("ditto", local_update={"lam": 0.5})
    assert isinstance(pipe.provider("local_update"), DittoUpdate) and pipe.provider("local_update").lam == 0.5
