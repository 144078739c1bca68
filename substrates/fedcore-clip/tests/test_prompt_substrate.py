"""fedcore_clip: frozen open_clip backbone, CoOp prompt learner, cached features, prompt share/update/eval."""
from __future__ import annotations

import hashlib

import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore.errors import ConfigError
from fedcore.stash import Stash
from fedcore.testing import parametrize_with_checks
from fedcore_clip import (
    CoOpPromptLearner,
    PromptEval,
    PromptShare,
    PromptUpdate,
    cached_features,
    check_architecture,
    encode_all,
    prompted_clip,
    train_prompt,
)
from fedcore_clip import testing as helpers
from fedcore_clip.testing import one_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def backbone_hash(model) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.backbone.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().numpy().tobytes())
    return h.hexdigest()


# PromptShare() and PromptEval() with their defaults: tests/test_registered_contracts.py (as declared); the prompt
# update there runs beside the prompt share, here under the whole-model split (the frozen tower sent and averaged too)
@parametrize_with_checks([PromptUpdate(epochs=1, lr=0.01)], fixture=helpers.WHOLE_MODEL_PROMPT_FIXTURE)
def test_contract(component, check):
    check(component)


def test_prompt_from_embeddings_equals_encode_text():
    """open_clip's encode_text over the 77 positions, to float rounding: encode_prompts runs the causal tower only up
    to the last end-of-text token (20 of 77 positions for these prompts; matrix shapes differ, so the last bits
    may), and nothing after it can reach the pooled feature, which padding the prompts shows exactly."""
    bb = helpers.tiny_backbone()
    m = helpers.tiny_prompted(n_ctx=4)
    ids = m.prompt.tokenized
    ref = bb.model.encode_text(ids)
    out = bb.encode_prompts(bb.embed_tokens(ids), ids)
    assert torch.allclose(ref, out, rtol=1e-5, atol=1e-6), float((ref - out).abs().max())
    end = int(ids.argmax(-1).max()) + 1
    assert end < ids.shape[1]
    shorter = bb.encode_prompts(bb.embed_tokens(ids[:, :end]), ids[:, :end])
    assert torch.equal(out, shorter)  # the positions after the last end-of-text token are never computed


@pytest.mark.parametrize("position", ["end", "middle", "front"])
def test_class_token_positions_keep_the_tokens(position):
    bb = helpers.tiny_backbone()
    names = ["red circle", "blue square", "cat"]
    learner = CoOpPromptLearner(bb, names, n_ctx=4, position=position)
    emb = learner()
    assert emb.shape == (3, bb.context_length, bb.token_width)
    full = bb.embed_tokens(learner.tokenized)
    for i, n in enumerate(learner.name_lens):
        name = full[i, 1 + 4:1 + 4 + n]
        start = {"end": 1 + 4, "front": 1, "middle": 1 + 2}[position]
        assert torch.equal(emb[i, start:start + n], name), "class tokens moved or changed"
        assert torch.equal(emb[i, 1 + 4 + n:], full[i, 1 + 4 + n:]), "suffix changed"


def test_unified_csc_and_text_init_shapes():
    bb = helpers.tiny_backbone()
    assert CoOpPromptLearner(bb, ["a", "b"], n_ctx=16).ctx.shape == (16, bb.token_width)
    assert CoOpPromptLearner(bb, ["a", "b", "c"], n_ctx=8, csc=True).ctx.shape == (3, 8, bb.token_width)
    init = CoOpPromptLearner(bb, ["a", "b"], init="a photo of a")
    assert init.n_ctx == 4
    ids = init.tokenized[0, 1:5]
    assert torch.equal(init.ctx.detach(), bb.embed_tokens(ids[None])[0])
    # with the init text, the learner's text features equal encode_text of "a photo of a a."
    m = prompted_clip(bb, ["dog"], init="a photo of a")
    ref = torch.nn.functional.normalize(bb.model.encode_text(m.prompt.tokenized), dim=-1)
    assert torch.allclose(m.text_features(), ref, atol=1e-6)


def test_init_is_seeded_normal_002():
    bb = helpers.tiny_backbone()
    a = CoOpPromptLearner(bb, ["a"], n_ctx=16, seed=3).ctx
    b = CoOpPromptLearner(bb, ["a"], n_ctx=16, seed=3).ctx
    assert torch.equal(a, b)
    assert 0.015 < float(a.detach().std()) < 0.025


def test_bad_inputs_fail_before_training():
    bb = helpers.tiny_backbone()
    with pytest.raises(ConfigError, match="n_ctx=0"):
        CoOpPromptLearner(bb, ["a"], n_ctx=0)
    with pytest.raises(ConfigError, match="context length is 24"):
        CoOpPromptLearner(bb, ["a very long class name that the tokenizer cannot fit anywhere at all"], n_ctx=16)
    with pytest.raises(ConfigError, match="close matches: .*ViT-B-16"):
        check_architecture("ViT-B-61")
    with pytest.raises(ConfigError, match="cache_features=True"):
        PromptUpdate(augment_shift=2)
    train, test = helpers.shapes_data(n_train=3)
    pipe = fedcore.Pipeline([FewShotPartition(shots=5, mode="iid"), PromptShare(), PromptUpdate(), PromptEval()])
    with pytest.raises(ConfigError, match="fewer than shots"):
        pipe.run(model=helpers.shapes_prompted(), train=train, test=test, num_clients=2, rounds=1)


def test_only_ctx_is_trainable_and_loss_falls_over_30_steps():
    m = helpers.shapes_prompted(n_ctx=4)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["prompt.ctx"]
    before = backbone_hash(m)
    train, _ = helpers.shapes_data(n_train=3)
    feats = encode_all(m.backbone, train, range(len(train)))
    scale = m.backbone.logit_scale()

    def loss():
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(scale * feats @ m.text_features().t(), train.y))

    start = loss()
    train_prompt(m, feats, train.y, epochs=30, lr=0.5, batch_size=len(train.y), schedule="constant",
                 generator=torch.Generator().manual_seed(0))
    assert loss() < start - 0.05
    assert backbone_hash(m) == before, "training the prompt changed the frozen CLIP"


def test_feature_cache_encodes_once_and_matches():
    bb = helpers.tiny_backbone()
    train, _ = helpers.shapes_data(n_train=2)
    stash = Stash()
    a = cached_features(stash, bb, train, [3, 1, 2])
    calls = []
    orig = bb.encode_image
    bb.encode_image = lambda x, **k: calls.append(len(x)) or orig(x, **k)
    try:
        b = cached_features(stash, bb, train, [1, 2, 3, 4])
    finally:
        del bb.encode_image
    assert calls == [1], "only the one new index is encoded"
    assert torch.equal(a[1:], b[:2])
    assert torch.allclose(b, encode_all(bb, train, [1, 2, 3, 4]))


def _run(pipe, rounds=2, seed=0, clients=3):
    train, test = helpers.shapes_data()
    return pipe.run(model=helpers.shapes_prompted(), train=train, test=test, num_clients=clients, rounds=rounds,
                    seed=seed)


def _promptfl(**kw):
    return fedcore.Pipeline([FewShotPartition(shots=2, mode="disjoint"), UniformSync(), PromptShare(),
                             PromptUpdate(lr=0.05, epochs=2, **kw), FedAvg(weighting="uniform"), PromptEval()])


def test_only_the_prompt_crosses_the_network_and_the_backbone_is_unchanged():
    model = helpers.shapes_prompted()
    before = backbone_hash(model)
    train, test = helpers.shapes_data()
    res = _promptfl().run(model=model, train=train, test=test, num_clients=3, rounds=2, seed=0)
    ctx_bytes = model.prompt.ctx.numel() * 4
    for r in range(2):
        assert res.ledger.total(direction="up", round=r) == 3 * ctx_bytes
        assert res.ledger.total(direction="down", round=r) == 3 * ctx_bytes
    assert backbone_hash(model) == before
    row = res.history[-1]
    for key in ("test_accuracy", "test_macro_f1", "local_accuracy", "local_accuracy_local_space"):
        assert 0.0 <= row[key] <= 1.0


def test_same_seed_same_history_and_cache_does_not_change_results():
    a = _run(_promptfl()).history.comparable()
    assert a == _run(_promptfl()).history.comparable()
    uncached = _run(_promptfl(cache_features=False)).history.comparable()
    for ra, rb in zip(a, uncached):
        assert ra["test_accuracy"] == pytest.approx(rb["test_accuracy"], abs=1e-6)
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-5)


def test_mean_of_identical_prompts_is_identity_and_of_two_is_midpoint():
    from fedcore.types import ClientUpdate

    a, b = torch.randn(4, 64), torch.randn(4, 64)
    agg = FedAvg(weighting="uniform")
    same = agg.fedcore_aggregate(None, [ClientUpdate(client_id=i, tensors={"prompt.ctx": a}, num_examples=i + 1)
                                        for i in range(3)], None)
    assert torch.allclose(same.state["prompt.ctx"], a)
    mid = agg.fedcore_aggregate(None, [ClientUpdate(client_id=0, tensors={"prompt.ctx": a}, num_examples=1),
                                       ClientUpdate(client_id=1, tensors={"prompt.ctx": b}, num_examples=9)], None)
    assert torch.allclose(mid.state["prompt.ctx"], (a + b) / 2, atol=1e-6)


def test_test_accuracy_is_the_final_prompts_accuracy_on_freshly_encoded_images():
    """prompt-eval's ``test_accuracy`` (what the learning check reads) equals the argmax accuracy of the final global
    model's forward pass, which encodes the test images itself: no stale cache, no wrong prompt, no label shift."""
    train, test = helpers.shapes_data()
    res = _promptfl().run(model=helpers.shapes_prompted(), train=train, test=test, num_clients=3, rounds=2, seed=0)
    with torch.no_grad():
        logits = res.model(test.x)
    assert res.history[-1]["test_accuracy"] == pytest.approx(float((logits.argmax(-1) == test.y).float().mean()))
    # on the random tiny CLIP one class wins every image, so the loss is what tells a shifted label set apart
    assert res.history[-1]["test_loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, test.y)))
    with torch.no_grad():  # and the prompt trained: its text features moved from the initial ones
        assert not torch.allclose(res.model.text_features(), helpers.shapes_prompted().text_features())
