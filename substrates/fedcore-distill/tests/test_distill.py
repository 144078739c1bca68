"""fedcore_distill: losses against hand computations, the message protocol and its ledger, sample-id alignment,
the p-group partition, costs at paper scale, bad input, and resume = an uninterrupted run."""
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fedcore
from fedcore import ConfigError
from fedcore.rng import derive_seed
from fedcore_distill import (
    FeaturePacket,
    PGroupPartition,
    check_feature_shapes,
    edge_resnet,
    fedvkd_model,
    forward_macs,
    hard_distill_targets,
    num_params,
    paper_models,
    soft_kd,
    synth_patterns_dataset,
    teacher_lookup,
    two_head_loss,
)

MICRO = {"num_classes": 4, "image_size": 8, "width": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}


def micro_run(recipe="fedvkd", rounds=2, run_kwargs=None, **overrides):
    train, test = synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8)
    pipe = fedcore.recipe(recipe, **overrides)
    return pipe.run(model=fedvkd_model(**MICRO), train=train, test=test, num_clients=3, rounds=rounds, seed=0,
                    **(run_kwargs or {}))


@functools.cache
def paper_run(rounds):
    """The recipe's defaults: shared by the tests that read the same run (read, never changed)."""
    return micro_run(rounds=rounds)


@functools.cache
def eval_pass_run(head):
    """One round whose soft labels come from an eval-mode pass of the server, through head ``head``."""
    return micro_run(rounds=1, aggregate={"logits_pass": "eval", "server_logits_head": head},
                     evaluate={"name": "kd-eval", "eval_head": head})


# ---- losses (spec 002 Sec. 5) ----

def test_soft_kd_equals_a_hand_computation_and_toggles_t_squared():
    s, t, T = torch.tensor([[1.0, 2.0, 0.5]]), torch.tensor([[0.2, -1.0, 3.0]]), 3.0
    p = [math.exp(v / T) for v in t[0].tolist()]
    p = [v / sum(p) for v in p]
    q = [math.exp(v / T) for v in s[0].tolist()]
    q = [v / sum(q) for v in q]
    kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    assert float(soft_kd(s, t, T, t2_scale=False)) == pytest.approx(kl, rel=1e-5)
    assert float(soft_kd(s, t, T)) == pytest.approx(kl * T * T, rel=1e-5)
    assert float(soft_kd(s, s, T)) == pytest.approx(0.0, abs=1e-6)


def test_soft_kd_gradient_reaches_only_the_student():
    s, t = torch.randn(4, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    soft_kd(s, t).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0 and t.grad is None


def test_dist_head_target_is_argmax_of_client_logits_and_w_dist_zero_is_plain_ce():
    z_c = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert hard_distill_targets(z_c).tolist() == [1, 0]
    cls, dist, y = torch.randn(2, 3), torch.randn(2, 3), torch.tensor([2, 1])
    expected = F.cross_entropy(cls, y) + F.cross_entropy(dist, torch.tensor([1, 0]))
    assert torch.allclose(two_head_loss(cls, dist, y, z_c), expected)
    assert torch.allclose(two_head_loss(cls, dist, y, z_c, w_dist=0.0), F.cross_entropy(cls, y))


def test_hybrid_vit_tokens_and_heads():
    from fedcore_distill import HybridViT  # subclasses a timm class: imported here, light at collection

    vit = HybridViT(feature_shape=(4, 8, 8), num_classes=3, embed_dim=16, depth=1, num_heads=2, patch_size=4)
    assert vit.patch_embed.num_patches == 4 and vit.pos_embed.shape[1] == 4 + 2  # n = (8/4)^2, + cls + dist
    h = torch.randn(2, 4, 8, 8)
    cls, dist = vit.train()(h)
    vit.eval()
    with torch.no_grad():
        c, d = vit.heads(h)
        assert torch.allclose(vit(h), (c + d) / 2)


# ---- the protocol and the ledger ----

def test_the_ledger_carries_exactly_the_message_fields():
    result = paper_run(2)
    rows = [r for r in result.run.ledger.to_rows() if r["nbytes"] > 0]
    kinds = {(r["direction"], r["kind"]) for r in rows}
    assert kinds == {("up", "sample_ids"), ("up", "features"), ("up", "logits"), ("up", "labels"),
                     ("down", "sample_ids"), ("down", "logits")}
    n, c = 48, 4
    shape = fedvkd_model(**MICRO).feature_shape
    per_round = {k: sum(r["nbytes"] for r in rows if (r["direction"], r["kind"]) == ("up", k) and r["round"] == 0)
                 for k in ("features", "logits", "labels", "sample_ids")}
    assert per_round == {"features": n * int(np.prod(shape)) * 4, "logits": n * c * 4, "labels": n * 8,
                         "sample_ids": n * 8}
    down0 = [r for r in rows if r["direction"] == "down" and r["round"] == 0]
    assert not down0, "round 0: no server logits exist yet, nothing comes down"
    assert sum(r["nbytes"] for r in rows if r["direction"] == "down") == n * c * 4 + n * 8


def test_server_logits_reach_their_samples_by_id_under_shuffling():
    result = eval_pass_run("mean")  # the default head
    system, views = result.model, result.run.server.aux.per_client  # the server-state channel keeps them
    train, _ = synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8)
    from fedcore_distill import edge_of

    for cid, view in views.items():
        assert sorted(view["teacher_ids"].tolist()) == sorted(result.run.partition.train[cid])
        edge = edge_of(system, result.run.client_states[cid], cid, 0).eval()
        with torch.no_grad():
            ids = view["teacher_ids"]
            expected = system.server.eval()(edge.features(train.x[ids]))
        assert torch.allclose(view["teacher_logits"], expected, atol=1e-5)
        perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(cid))
        lookup = teacher_lookup(cid, ids[perm], view["teacher_logits"][perm], ids)
        for i, row in zip(ids.tolist(), view["teacher_logits"]):
            assert torch.equal(lookup[i], row)


def test_round_zero_is_ce_only_and_later_rounds_distil():
    result = paper_run(2)
    rows = result.history.rows
    assert rows[0]["bytes_down"] == 0 and rows[1]["bytes_down"] > 0
    # the clients' KD loss reaches the history (engine's client-metric columns): no teacher in round 0, then some
    assert rows[0]["client_kd_loss"] == rows[0]["client_kd_loss_max"] == 0
    assert rows[1]["client_kd_loss"] > 0 and rows[1]["client_kd_loss_min"] <= rows[1]["client_kd_loss_max"]
    assert rows[1]["client_loss"] == pytest.approx(rows[1]["train_loss"])


# ---- bad input ----

def test_mismatched_feature_shapes_are_refused_naming_the_shapes():
    a = FeaturePacket(client_id=0, sample_ids=torch.arange(2), features=torch.zeros(2, 4, 8, 8),
                      logits=torch.zeros(2, 3), labels=torch.zeros(2, dtype=torch.long))
    b = FeaturePacket(client_id=1, sample_ids=torch.arange(2), features=torch.zeros(2, 8, 4, 4),
                      logits=torch.zeros(2, 3), labels=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ConfigError, match=r"client 1 uploaded features of shape \(8, 4, 4\); client 0 uploaded "
                                          r"\(4, 8, 8\)"):
        check_feature_shapes([a, b])


def test_server_logits_for_unknown_sample_ids_are_refused():
    with pytest.raises(ConfigError, match=r"client 2 received server logits for sample ids \[7, 9\]"):
        teacher_lookup(2, torch.tensor([1, 7, 9]), torch.zeros(3, 2), torch.tensor([1, 2, 3]))


def test_a_cut_that_leaves_no_classifier_is_refused():
    with pytest.raises(ConfigError, match="cut='fc' leaves no classifier"):
        edge_resnet(num_classes=4, width=4, cut="fc")
    with pytest.raises(ConfigError, match="cut='layer9' is not a stage"):
        edge_resnet(num_classes=4, width=4, cut="layer9")


@pytest.mark.parametrize("p", [0.0, 1.5, -0.1])
def test_p_outside_zero_one_is_refused(p):
    with pytest.raises(ConfigError, match=f"p={p}"):
        fedcore.get("p-group")(p=p)


def test_more_groups_than_classes_is_refused():
    train, test = synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8)
    pipe = fedcore.recipe("fedvkd", partition={"name": "p-group", "num_groups": 5})
    with pytest.raises(ConfigError, match="num_groups=5 is more than the 4 classes"):
        pipe.run(model=fedvkd_model(**MICRO), train=train, test=test, num_clients=5, rounds=1, seed=0)


# ---- the p-group partition ----

def _partition(p, seed=0, n=4000, clients=10):
    from fedcore.testing import ContractFixture, build_engine

    ds = synth_patterns_dataset(n=n, n_test=10, num_classes=10, size=8)
    fx = ContractFixture(data_factory=lambda: ds, num_clients=clients, seed=seed)
    engine = build_engine([PGroupPartition(p=p)], fx)
    return engine.run_ctx.partition.train, ds[0].y.numpy()


def test_p_group_statistics():
    parts, labels = _partition(0.2)
    flat = sorted(i for part in parts for i in part)
    assert flat == list(range(len(labels)))  # each sample exactly once
    # 10 clients, 10 groups: one client per group; the share of a client's data from its dominant class ~ p
    shares = [np.bincount(labels[list(part)], minlength=10).max() / len(part) for part in parts]
    assert abs(np.mean(shares) - 0.2) < 0.03
    iid, _ = _partition(0.1)
    hist = np.array([np.bincount(labels[list(part)], minlength=10) / len(part) for part in iid])
    assert np.abs(hist - 0.1).max() < 0.06
    again, _ = _partition(0.2)
    assert again == parts


@pytest.mark.parametrize("clients, groups", [(10, 10), (23, 4), (7, 3)])
def test_p_group_deals_each_sample_as_one_draw_per_sample_would(clients, groups):
    """The array deal equals the loop it replaced (a draw per sample of a client of its group, in sample order), with
    groups of one client and of unequal sizes, and leaves the generator where the loop left it."""
    from fedcore_distill.pgroup import deal

    setup = np.random.default_rng(clients)
    group = setup.integers(0, groups, size=5000)
    client_group = setup.permutation(np.arange(clients) % groups)
    members = [np.flatnonzero(client_group == g) for g in range(groups)]
    loop_rng, rng = np.random.default_rng(1), np.random.default_rng(1)
    expected: list[list[int]] = [[] for _ in range(clients)]
    for i, g in enumerate(group):
        expected[int(members[g][loop_rng.integers(len(members[g]))])].append(i)
    assert deal(group, members, rng) == expected
    assert rng.random() == loop_rng.random()


# ---- costs at paper scale (spec 002 Sec. 4.4, +-2 %) ----

@pytest.mark.slow
def test_costs_at_paper_scale_match_the_spec():
    """Counted on the meta device (shapes decide parameters and MACs; forward_macs counts on a meta copy anyway), so
    the 180 M parameters of each image size are never initialised."""
    with torch.device("meta"):
        cifar, imagenet = paper_models("cifar"), paper_models("imagenet")
    assert forward_macs(cifar["extractor"], (3, 32, 32)) / 1e9 == pytest.approx(0.153, rel=0.02)
    assert forward_macs(cifar["edge"], (3, 32, 32)) / 1e9 == pytest.approx(0.555, rel=0.02)
    assert num_params(cifar["edge"]) / 1e6 == pytest.approx(11.17, rel=0.02)
    vit = forward_macs(cifar["vit_server"], (64, 32, 32)) / 1e9
    assert vit == pytest.approx(5.69 + 0.05, rel=0.02)
    assert sum(num_params(b) for b in cifar["vit_server"].blocks) / 1e6 == pytest.approx(85.06, rel=0.02)
    assert forward_macs(cifar["resnet109"], (64, 32, 32)) / 1e9 == pytest.approx(0.167, rel=0.02)
    assert num_params(cifar["resnet109"]) / 1e6 == pytest.approx(1.15, rel=0.02)
    ratio = forward_macs(cifar["fedavg_vit"], (3, 32, 32)) / forward_macs(cifar["edge"], (3, 32, 32))
    assert ratio == pytest.approx(10.6, rel=0.03)
    assert forward_macs(imagenet["edge"], (3, 224, 224)) / 1e9 == pytest.approx(1.814, rel=0.02)
    assert forward_macs(imagenet["vit_server"], (64, 56, 56)) / 1e9 == pytest.approx(17.54 + 0.15, rel=0.02)
    assert forward_macs(imagenet["resnet109"], (64, 56, 56)) / 1e9 == pytest.approx(0.511, rel=0.02)


# ---- resume ----

def test_resume_equals_an_uninterrupted_run(tmp_path):
    from fedcore.engine.checkpoint import Checkpointer
    from fedcore.engine.loop import Engine

    class Stop(Exception):
        pass

    train, test = synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8)

    def make(checkpoint=None):
        torch.manual_seed(0)
        return Engine(fedcore.recipe("fedvkd", aggregate={"epochs": 1}), model=fedvkd_model(**MICRO), train=train,
                      test=test, num_clients=3, rounds=3, seed=1, checkpoint=checkpoint)

    full = make().run()
    first = make(Checkpointer(tmp_path, every=1))

    def crash(record):
        if record["round"] == 1:
            raise Stop

    first.on_round = crash
    with pytest.raises(Stop):
        first.run()
    resumed = make(Checkpointer(tmp_path, every=1, resume=True)).run()
    assert resumed.history.comparable() == full.history.comparable()
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert resumed.ledger.to_rows() == full.ledger.to_rows()


def test_edge_init_is_independent_per_client_and_seeded():
    result = paper_run(1)
    states = result.run.client_states
    w0, w1 = (states[c].tensors["edge.extractor.0.weight"] for c in (0, 1))
    assert not torch.equal(w0, w1)
    assert derive_seed(0, "edge-init", 0) != derive_seed(0, "edge-init", 1)


def test_asynchronous_operation_records_staleness():
    """Watch, phone and laptop clients, two training at once: the laptop (about 4x the phone's speed) is
    re-dispatched on every arrival, so for the first rounds only it arrives, each time on the newest version
    (staleness 0). The phone's and the watch's packets arrive later, made on versions the laptop's packets have
    since replaced: the run must be long enough for them to arrive (4 rounds were not: round 6 is the watch's)."""
    from fedcore.runtime import SimClock

    clock = {"clock": SimClock(default_profile="phone"), "profiles": ["watch", "phone", "laptop"]}
    result = micro_run(rounds=8, run_kwargs=clock, schedule={"name": "async", "concurrency": 2},
                       aggregate={"epochs": 1})
    rows = result.history.rows
    assert all(r["agg_clients"] == 1.0 for r in rows)  # the server trains on each arriving packet
    assert max(r.get("max_staleness") or 0 for r in rows) >= 1  # packets made on an older server version arrived
    assert all("agg_staleness_max" in r for r in rows)  # the server trainer records what it trained on
    assert [r.get("max_staleness", 0) for r in rows] == [r["agg_staleness_max"] for r in rows]
    assert {c for r in rows for c in r["clients"]} == {0, 1, 2}  # every device's packets arrived
    assert all(math.isfinite(r["test_accuracy"]) for r in rows)


def test_extract_augment_extracts_from_augmented_images_in_eval_mode():
    """Spec 002 A10: ``extract_augment=False`` (the default) uploads the clean images' features; True the features
    of the train augmentation (crop + flip) of the same samples, still with the edge in eval mode."""
    from fedcore_distill import EdgeKDTrain, augment

    train, _ = synth_patterns_dataset(n=24, n_test=4, num_classes=4, size=8)
    edge = fedvkd_model(**MICRO).edge
    ids = torch.arange(24)
    step = EdgeKDTrain(extract_augment=True)
    clean = step.extract(0, edge, train, ids)
    with torch.no_grad():
        assert torch.allclose(clean.features, edge.eval().features(train.x[ids]), atol=1e-6)
    augmented = step.extract(0, edge, train, ids, torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = edge.features(augment(train.x[ids], torch.Generator().manual_seed(1)))
    assert torch.allclose(augmented.features, expected, atol=1e-6)
    assert not torch.allclose(augmented.features, clean.features)
    assert not edge.training
    kd = {"name": "edge-kd-train", "extract_augment": True}
    on = micro_run(rounds=1, local_update=kd).run.server.aux.per_client  # the server-state channel keeps them
    off = paper_run(1).run.server.aux.per_client
    assert any(not torch.equal(on[c]["teacher_logits"], off[c]["teacher_logits"]) for c in on)


def test_server_logits_head_and_eval_head_pick_a_server_output():
    """Spec 002 A6: ``server_logits_head`` picks what goes back as soft labels, ``eval_head`` what test_accuracy
    scores; "mean" (the default) is DeiT's eval output, the mean of the class and distillation heads."""
    from fedcore_distill import edge_of
    from fedcore_distill.evaluate import server_heads

    train, _ = synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8)
    for head in ("mean", "cls", "dist"):
        result = eval_pass_run(head)
        system, views = result.model, result.run.server.aux.per_client
        cid = next(iter(views))
        edge = edge_of(system, result.run.client_states[cid], cid, 0).eval()
        with torch.no_grad():
            h = edge.features(train.x[views[cid]["teacher_ids"]])
            cls_logits, dist_logits = server_heads(system.server.eval(), h)
        expected = {"mean": (cls_logits + dist_logits) / 2, "cls": cls_logits, "dist": dist_logits}[head]
        assert torch.allclose(views[cid]["teacher_logits"], expected, atol=1e-5)
        row = result.history.rows[-1]
        if head != "mean":
            assert row["test_accuracy"] == row[f"{head}_accuracy"]
    assert not torch.allclose(cls_logits, dist_logits)  # the two heads differ, so the choice is visible
