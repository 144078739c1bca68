"""Spec 002's option switches (issue 28 item 2): each checked against the property the spec defines for it.

``edge_kd_form = "eq6"`` (A2), ``edge_head = "light"`` (Sec. 1.2 / A3), ``patch_embed_location = "edge"`` (A4),
``feature_memory`` (A21), ``async_scope`` / ``server_epochs_async`` (Sec. 1.6 / A11), ``count_eval_traffic``
(Sec. 1.4), and the frozen-extractor control of the FedVKD sweep (``freeze_extractor``)."""
import functools
import math

import pytest
import torch

import fedcore
from fedcore import ConfigError
from fedcore.types import ClientState
from fedcore_distill import EdgeKDTrain, edge_of, fedvkd_model, synth_patterns_dataset
from fedcore_distill.losses import edge_kd_loss
from fedcore_distill.server import FEATURE_STORE

MICRO = {"num_classes": 4, "image_size": 8, "width": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}
N, N_TEST, CLIENTS = 48, 16, 3
FEATURE_FLOATS = 4 * 8 * 8  # the micro extractor's 4 x 8 x 8 map (width 4, layer1, 8x8 input)


def micro_run(rounds=2, model=None, run_kwargs=None, **overrides):
    train, test = synth_patterns_dataset(n=N, n_test=N_TEST, num_classes=4, size=8)
    pipe = fedcore.recipe("fedvkd", **overrides)
    return pipe.run(model=model or fedvkd_model(**MICRO), train=train, test=test, num_clients=CLIENTS,
                    rounds=rounds, seed=0, **(run_kwargs or {}))


@functools.cache
def paper_run():
    """The recipe's defaults for 2 rounds: the baseline four tests compare an option against (read, never changed)."""
    return micro_run(rounds=2)


def _softmax(v, t=1.0):
    e = [math.exp(x / t) for x in v]
    return [x / sum(e) for x in e]


# ---- edge_kd_form (A2) ----

def test_eq6_edge_loss_equals_the_formula_on_a_hand_computed_case():
    """Eq. 6: ``(1 - lambda) CE + lambda T^2 KL(p_T(teacher) || p_T(student))``; Eq. 14: ``CE + beta T^2 KL``."""
    z, teacher, y, t, lam = [1.0, 2.0, 0.5], [0.2, -1.0, 3.0], 2, 3.0, 0.25
    ce = -math.log(_softmax(z)[y])
    p, q = _softmax(teacher, t), _softmax(z, t)
    kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    args = (torch.tensor([z]), torch.tensor([y]), torch.tensor([teacher]), torch.tensor([True]))
    eq6 = EdgeKDTrain(edge_kd_form="eq6", kd_lambda=lam, temperature=t)
    assert float(eq6.edge_loss(*args)[0]) == pytest.approx((1 - lam) * ce + lam * t * t * kl, rel=1e-5)
    eq14 = EdgeKDTrain(beta=0.5, temperature=t)
    assert float(eq14.edge_loss(*args)[0]) == pytest.approx(ce + 0.5 * t * t * kl, rel=1e-5)
    literal = EdgeKDTrain(edge_kd_form="eq6", kd_lambda=lam, temperature=t, t2_scale=False)
    assert float(literal.edge_loss(*args)[0]) == pytest.approx((1 - lam) * ce + lam * kl, rel=1e-5)
    # round 0 (no server logits): CE only, whatever the form
    assert float(eq6.edge_loss(*args[:3], torch.tensor([False]))[0]) == pytest.approx(ce, rel=1e-6)


def test_eq6_weights_the_kd_term_by_the_share_of_the_batch_with_server_logits():
    z, y, teacher = torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), torch.randn(4, 5)
    has = torch.tensor([True, False, True, False])
    loss, kd = edge_kd_loss(z, y, teacher, has, form="eq6", kd_lambda=0.5)
    ce = torch.nn.functional.cross_entropy(z, y)
    assert kd is not None and float(loss) == pytest.approx(float(0.5 * ce + 0.5 * kd * 0.5), rel=1e-6)


def test_eq6_reaches_the_local_update():
    """kd_lambda = 0 is plain CE (the same run as beta = 0); kd_lambda = 0.5 trains differently."""
    ce_only = micro_run(local_update={"edge_kd_form": "eq6", "kd_lambda": 0.0, "augment": False})
    beta0 = micro_run(local_update={"beta": 0.0, "augment": False})
    half = micro_run(local_update={"edge_kd_form": "eq6", "kd_lambda": 0.5, "augment": False})
    assert ce_only.history.comparable() == beta0.history.comparable()
    assert half.history.rows[-1]["train_loss"] != beta0.history.rows[-1]["train_loss"]


@pytest.mark.parametrize("settings, field", [({"edge_kd_form": "eq7"}, "edge_kd_form"),
                                             ({"kd_lambda": 1.5}, "kd_lambda"),
                                             ({"edge_kd_form": "eq6", "beta": 0.5}, "beta")])
def test_edge_kd_settings_refuse_bad_values_in_one_line(settings, field):
    with pytest.raises(ConfigError, match=f"EdgeKDTrain.{field}=") as err:
        EdgeKDTrain(**settings)
    assert "\n" not in str(err.value)


# ---- edge_head (Sec. 1.2, A3) ----

def test_light_edge_head_is_one_basic_block_gap_and_fc():
    c, classes = 4, 4
    light = fedvkd_model(**MICRO, edge_head="light").edge
    full = fedvkd_model(**MICRO).edge
    # BasicBlock(c, c): two 3x3 convs without bias and two batch norms; then FC c -> classes
    assert sum(p.numel() for p in light.classifier.parameters()) == 2 * 9 * c * c + 2 * 2 * c + c * classes + classes
    assert sum(p.numel() for p in light.classifier.parameters()) < sum(p.numel() for p in full.classifier.parameters())
    assert [type(m).__name__ for m in light.classifier] == ["BasicBlock", "AdaptiveAvgPool2d", "Flatten", "Linear"]
    x = torch.randn(2, 3, 8, 8)
    assert light(x).shape == (2, classes)
    assert torch.equal(light.extractor[0].weight, full.extractor[0].weight)  # the same extractor, another head
    row = micro_run(rounds=1, model=fedvkd_model(**MICRO, edge_head="light")).history.rows[-1]
    assert 0.0 <= row["edge_accuracy"] <= 1.0


def test_edge_head_refuses_unknown_values():
    with pytest.raises(ConfigError, match="edge_head='tiny' is not allowed; choose one of: 'resnet18_rest', 'light'"):
        fedvkd_model(**MICRO, edge_head="tiny")


# ---- patch_embed_location (A4) ----

def test_patch_embedding_on_the_edge_uploads_token_maps_and_stays_untrained():
    model = fedvkd_model(**MICRO, patch_embed_location="edge")
    assert model.feature_shape == (16, 2, 2)  # embed_dim x (8/4) x (8/4)
    assert isinstance(model.server.patch_embed.proj, torch.nn.Identity)
    result = micro_run(rounds=2, model=model)
    up = result.ledger.by_kind(round=0)
    assert up[("up", "features")] == N * 16 * 2 * 2 * 4  # 64 floats per sample, not the 256 of the map
    server_side = paper_run().ledger.by_kind(round=0)
    assert server_side[("up", "features")] == N * FEATURE_FLOATS * 4
    for cid in range(CLIENTS):  # no loss reaches the edge's embedding: it keeps its initial weights
        trained = edge_of(result.model, result.run.client_states[cid], cid, 0)
        initial = edge_of(result.model, ClientState(client_id=cid), cid, 0)
        assert torch.equal(trained.embed.weight, initial.embed.weight)
        assert not torch.equal(trained.extractor[0].weight, initial.extractor[0].weight)
    assert math.isfinite(result.history.rows[-1]["test_accuracy"])


def test_patch_embed_location_refuses_unknown_values():
    with pytest.raises(ConfigError, match="patch_embed_location='client' is not allowed; choose one of"):
        fedvkd_model(**MICRO, patch_embed_location="client")


# ---- feature_memory (A21) ----

def _packet_bytes(n):
    return n * (8 + FEATURE_FLOATS * 4 + 4 * 4 + 8)  # sample id, features, 4 logits, label


def test_feature_memory_trains_on_the_last_rounds_and_holds_their_packets():
    rows = micro_run(rounds=3, aggregate={"feature_memory": 2}).history.rows
    assert [r["agg_server_train_samples"] for r in rows] == [N, 2 * N, 2 * N]
    assert [r["agg_feature_store_bytes"] for r in rows] == [_packet_bytes(N)] * 3  # one round kept for the next
    paper = paper_run()
    assert [r["agg_server_train_samples"] for r in paper.history.rows] == [N, N]
    assert [r["agg_feature_store_bytes"] for r in paper.history.rows] == [0, 0]
    assert FEATURE_STORE not in paper.run.server.stash
    with pytest.raises(ConfigError, match="feature_memory=0"):
        fedcore.recipe("fedvkd", aggregate={"feature_memory": 0})


# ---- async_scope / server_epochs_async (Sec. 1.6, A11) ----

def _async_rows(**aggregate):
    """4 arrivals of three equal clients: clients 0, 1, 2 arrive in turn, then client 0 again (its newer packet
    replaces its first in the store)."""
    from fedcore.runtime import SimClock

    clock = {"clock": SimClock(default_profile="phone"), "profiles": ["laptop", "laptop", "laptop"]}
    return micro_run(rounds=4, run_kwargs=clock, schedule={"name": "async", "concurrency": 3},
                     aggregate={"epochs": 2, **aggregate}).history.rows


def test_async_scope_store_trains_on_the_latest_packet_of_every_client():
    per_client = N // CLIENTS
    arrival = _async_rows(server_epochs_async=1)
    assert all(r["agg_server_train_samples"] == per_client for r in arrival)  # the arriving packet only
    assert all(r["agg_server_epochs"] == 1.0 for r in arrival)
    store = _async_rows(async_scope="store")
    seen, expected = set(), []
    for r in store:
        seen |= set(r["clients"])
        expected.append(per_client * len(seen))
    assert [r["agg_server_train_samples"] for r in store] == expected
    assert expected[-1] == N and len(store) > len(seen)  # every client's latest packet, once, after a re-arrival
    assert all(r["agg_server_epochs"] == 2.0 for r in store)  # server_epochs_async unset: epochs
    assert store[-1]["agg_feature_store_bytes"] == _packet_bytes(N)


def test_barrier_round_ignores_server_epochs_async_and_equals_arrival_scope():
    plain = paper_run()
    other = micro_run(rounds=2, aggregate={"async_scope": "store", "server_epochs_async": 1})
    assert [r["agg_server_epochs"] for r in other.history.rows] == [3.0, 3.0]  # every client arrived
    assert [r["test_accuracy"] for r in other.history.rows] == [r["test_accuracy"] for r in plain.history.rows]
    with pytest.raises(ConfigError, match="async_scope='all' is not allowed"):
        fedcore.recipe("fedvkd", aggregate={"async_scope": "all"})


# ---- count_eval_traffic (Sec. 1.4) ----

def test_count_eval_traffic_books_every_clients_test_features():
    counted = micro_run(rounds=2, evaluate={"name": "kd-eval", "count_eval_traffic": True})
    plain = paper_run()
    for r in (0, 1):
        kinds = counted.ledger.by_kind(round=r)
        assert kinds[("up", "eval_features")] == CLIENTS * N_TEST * FEATURE_FLOATS * 4
        assert kinds[("up", "eval_labels")] == CLIENTS * N_TEST * 8
        assert counted.history.rows[r]["eval_bytes_up"] == CLIENTS * N_TEST * (FEATURE_FLOATS * 4 + 8)
        training = {k: v for k, v in kinds.items() if not k[1].startswith("eval_")}
        assert training == plain.ledger.by_kind(round=r)  # nothing else changes
        row = counted.history.rows[r]  # the round that evaluated carries the upload (it was one row late)
        assert row["bytes_up"] == counted.ledger.total(round=r, direction="up") == (
            plain.history.rows[r]["bytes_up"] + row["eval_bytes_up"])
        assert row["bytes_up_total"] == sum(counted.ledger.total(round=k, direction="up") for k in range(r + 1))
    assert not any(k[1].startswith("eval_") for k in plain.ledger.by_kind())
    assert "eval_bytes_up" not in plain.history.rows[-1]
    assert [r["test_accuracy"] for r in counted.history.rows] == [r["test_accuracy"] for r in plain.history.rows]


# ---- the frozen-extractor control ----

def test_frozen_shared_extractor_keeps_its_init_in_every_client():
    result = micro_run(rounds=2, split={"same_init": True}, local_update={"freeze_extractor": True})
    system, states = result.model, result.run.client_states
    initial = edge_of(system, ClientState(client_id=0), 0, 0, same_init=True)
    for cid in range(CLIENTS):
        edge = edge_of(system, states[cid], cid, 0)
        for (name, value), start in zip(edge.extractor.state_dict().items(), initial.extractor.state_dict().values()):
            assert torch.equal(value, start), (cid, name)  # weights and batch-norm statistics
        assert not torch.equal(edge.classifier[-1].weight, initial.classifier[-1].weight)  # the head trains
    trained = micro_run(rounds=2, split={"same_init": True}).run.client_states
    moved = edge_of(system, trained[0], 0, 0).extractor[0].weight
    assert not torch.equal(moved, initial.extractor[0].weight)
