"""The substrate's components: submodel-share, submodel-train and masked-delta, alone and in runs."""
import functools

import attrs
import pytest
import torch

import fedcore
from fedcore import ClientInfo, ClientUpdate, DropUpdate
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.runtime import SimClock
from fedcore.testing import tiny_data
from fedcore_pruning import (
    COORDINATES_META,
    SUBMODEL_META,
    MaskedDelta,
    SubmodelMismatchError,
    SubmodelShare,
    SubmodelSpec,
    SubmodelTrain,
    ViTShape,
    extract,
    fedrolex_spec,
    heterofl_spec,
    masked_delta,
    to_global_coordinates,
    update_delta,
)


def vit(seed: int = 0):
    torch.manual_seed(seed)
    return micro_vit(num_classes=4, embed_dim=16, depth=2, num_heads=4)


class Ctx:
    """The one field of a round context the share reads."""

    def __init__(self, round: int) -> None:
        self.round = round


def trained_update(model, spec, client_id=0, seed=1):
    """A submodel update as the engine hands it to the aggregator: sliced values, base and index map."""
    sub = extract(model, spec)
    base = {k: v.clone() for k, v in sub.state_dict().items()}
    g = torch.Generator().manual_seed(seed)
    upload = [n for n, p in sub.named_parameters() if p.requires_grad]
    tensors = {k: base[k] + 0.01 * torch.randn(base[k].shape, generator=g) for k in upload}
    return ClientUpdate(client_id=client_id, tensors=tensors, base={k: base[k] for k in upload}, num_examples=10,
                        meta={SUBMODEL_META: spec.to_data()})


def test_spec_travels_as_plain_data_and_comes_back_equal():
    shape = ViTShape.of(vit())
    spec = SubmodelSpec.build(shape, window_start=1, heads=[[0, 2], [1]], hidden=[[1, 5], None], exits=[2],
                              classes=[0, 3])
    back = SubmodelSpec.from_data(spec.to_data())
    assert back.to_data() == spec.to_data() and back.blocks[0].heads == (0, 2)
    with pytest.raises(ConfigError, match="lacks"):
        SubmodelSpec.from_data({"shape": shape.to_data()})


@pytest.mark.parametrize("rule,expect", [("rolling", [(1, 2), (2, 3), (0, 3)]), ("prefix", [(0, 1)] * 3)])
def test_share_slices_by_budget_and_rule(rule, expect):
    model = vit()
    share = SubmodelShare(rule=rule, widths=(1.0, 0.5))
    for r, heads in zip((1, 2, 3), expect):
        half = share.fedcore_split_model(model=model, client=ClientInfo(id=1, num_samples=5), state=None, ctx=Ctx(r))
        assert half.module.spec.blocks[0].heads == heads
        assert half.module.blocks[0].attn.qkv.weight.shape == (3 * 2 * 4, 16)  # 2 of 4 heads, physically
        assert set(half.upload) == set(half.download) == set(half.module.state_dict())
        assert SubmodelSpec.from_data(half.meta[SUBMODEL_META]).to_data() == half.module.spec.to_data()
    whole = share.fedcore_split_model(model=model, client=ClientInfo(id=2, num_samples=5), state=None, ctx=Ctx(1))
    assert whole.meta["width"] == 1.0 and whole.module.blocks[1].mlp.fc1.weight.shape == (32, 16)


def test_device_tier_sets_the_budget():
    share = SubmodelShare(widths=(1.0,), tier_widths={"watch": 0.25})
    assert share.width_of(ClientInfo(id=0, num_samples=1, profile="watch")) == 0.25
    assert share.width_of(ClientInfo(id=0, num_samples=1, profile="laptop")) == 1.0


@pytest.mark.parametrize("settings,match", [
    ({"widths": (1.0, 0.0)}, r"widths\[1\]=0.0 is a budget outside \(0, 1\]"),
    ({"widths": (1.5,)}, r"widths\[0\]=1.5 is a budget outside"),
    ({"widths": ()}, "widths is empty"),
    ({"tier_widths": {"phone": -1}}, r"tier_widths\['phone'\]=-1 is a budget outside"),
    ({"rule": "random"}, "rule='random' is not allowed; choose one of: 'rolling', 'prefix'"),
])
def test_bad_budgets_are_refused(settings, match):
    with pytest.raises(ConfigError, match=match):
        SubmodelShare(**settings)


def test_a_width_that_leaves_no_head_is_refused():
    share = SubmodelShare(widths=(0.2,))
    with pytest.raises(ConfigError, match=r"width=0.2 leaves no head: .* smallest width of this model is 1/4"):
        share.fedcore_split_model(model=vit(), client=ClientInfo(id=0, num_samples=1), state=None, ctx=Ctx(0))


def test_submodel_share_refuses_an_aggregator_that_cannot_merge_slices():
    with pytest.raises(ConfigError, match=r"^split 'submodel-share' uploads sliced submodels, which aggregate "
                                          r"'fedavg' does not merge \(it merges whole weights\); use an aggregator "
                                          r"that merges them: aggregate = \"masked-delta\"$"):
        fedcore.Pipeline([SubmodelShare(), SubmodelTrain()])


def test_update_delta_equals_masked_delta_in_every_form():
    model = vit()
    state, shape = model.state_dict(), ViTShape.of(model)
    spec = fedrolex_spec(shape, 0.5, round=3)
    update = trained_update(model, spec)
    delta, mask = update_delta(update, state, shape)
    ref_delta, ref_mask = masked_delta(update.base, update.tensors, spec, state)
    assert mask.keys() == ref_mask.keys() and all(torch.equal(mask[k], ref_mask[k]) for k in mask)
    assert all(torch.equal(delta[k], ref_delta[k]) for k in delta)
    stale = to_global_coordinates(update, state, shape)
    assert stale.meta[COORDINATES_META] == "global"
    assert all(stale.tensors[k].shape == state[k].shape for k in stale.tensors)
    g_delta, g_mask = update_delta(stale, state, shape)
    assert all(torch.equal(g_mask[k], mask[k]) and torch.allclose(g_delta[k], delta[k], atol=1e-7) for k in mask)


def test_a_mismatched_index_map_is_one_error_and_nothing_merges():
    model = vit()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    good = trained_update(model, fedrolex_spec(ViTShape.of(model), 0.5, round=0), client_id=0)
    other = attrs.evolve(ViTShape.of(model), num_classes=7)
    wrong_model = trained_update(model, heterofl_spec(ViTShape.of(model), 0.5), client_id=1)
    wrong_model = attrs.evolve(wrong_model, meta={SUBMODEL_META: {**wrong_model.meta[SUBMODEL_META],
                                                                 "shape": other.to_data()}})
    with pytest.raises(SubmodelMismatchError, match=r"client 1: its index map is for another model: num_classes=7"):
        MaskedDelta().fedcore_aggregate(model=model, updates=[good, wrong_model], ctx=None)
    too_big = attrs.evolve(good, client_id=2, tensors={**good.tensors, "blocks.0.mlp.fc1.bias": torch.zeros(33)},
                           base={**good.base, "blocks.0.mlp.fc1.bias": torch.zeros(33)})
    with pytest.raises(SubmodelMismatchError, match=r"client 2: sub_state tensor blocks.0.mlp.fc1.bias has shape"):
        MaskedDelta().fedcore_aggregate(model=model, updates=[good, too_big], ctx=None)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_stale_updates_are_scattered_or_dropped_with_the_reason():
    model = vit()
    good = trained_update(model, fedrolex_spec(ViTShape.of(model), 0.5, round=0))
    adapted = MaskedDelta().fedcore_adapt_update(update=good, model=model, ctx=None)
    assert adapted.meta[COORDINATES_META] == "global"
    bad = attrs.evolve(good, meta={SUBMODEL_META: {**good.meta[SUBMODEL_META], "window_length": 9}})
    dropped = MaskedDelta().fedcore_adapt_update(update=bad, model=model, ctx=None)
    assert isinstance(dropped, DropUpdate) and "its index map is invalid" in dropped.reason
    assert MaskedDelta().fedcore_adapt_update(update=attrs.evolve(good, meta={}), model=model, ctx=None) is None


def test_overlapping_submodels_average_per_element_untouched_elements_stay():
    model = vit()
    shape, state = ViTShape.of(model), model.state_dict()
    a = trained_update(model, heterofl_spec(shape, 0.25), client_id=0, seed=1)  # head 0, hidden 0-7
    b = trained_update(model, heterofl_spec(shape, 0.5), client_id=1, seed=2)   # heads 0-1, hidden 0-15
    out = MaskedDelta().fedcore_aggregate(model=model, updates=[a, b], ctx=None).state
    fc1 = "blocks.0.mlp.fc1.weight"
    assert torch.allclose(out[fc1][:8], (a.tensors[fc1] + b.tensors[fc1][:8]) / 2, atol=1e-6)  # both trained
    assert torch.allclose(out[fc1][8:16], b.tensors[fc1][8:], atol=1e-6)                       # only b trained
    assert torch.equal(out[fc1][16:], state[fc1][16:])                                          # nobody trained


def test_full_width_fedrolex_is_uniform_fedavg():
    """Same SGD steps (Adam would amplify the 1e-9 differences of explicit vs fused attention)."""
    train, test = tiny_data(n=48, n_test=24)
    runs = {}
    for name, pipe in [("fedavg", fedcore.Pipeline.from_config({
            "local_update": {"name": "sgd", "lr": 0.05},
            "aggregate": {"name": "fedavg", "weighting": "uniform"}})),
            ("fedrolex", fedcore.recipe("fedrolex", split={"widths": [1.0]},
                                        local_update={"optimizer": "sgd", "lr": 0.05}))]:
        runs[name] = pipe.run(model=vit(), train=train, test=test, num_clients=3, rounds=2, seed=0).model.state_dict()
    start = vit().state_dict()
    assert all(torch.allclose(runs["fedavg"][k], runs["fedrolex"][k], atol=1e-6) for k in start)
    assert not all(torch.allclose(runs["fedavg"][k], start[k], atol=1e-4) for k in start)  # it did train


SEMI_ASYNC_PROFILES = ["watch", "phone", "laptop", "laptop"]


def semi_async_run(recipe, checkpoint=None, on_round=None):
    """4 rounds of ``recipe`` under semi-async on devices of very different speeds: some updates arrive stale."""
    train, test = tiny_data(n=64, n_test=24)
    pipe = fedcore.recipe(recipe, schedule={"name": "semi-async", "mu": 0.5, "t_clk": 0.0})
    return pipe.run(model=vit(), train=train, test=test, num_clients=4, rounds=4, seed=0, clock=SimClock(),
                    profiles=SEMI_ASYNC_PROFILES, checkpoint=checkpoint, on_round=on_round)


@functools.cache
def uninterrupted_semi_async_run(recipe):
    """The plain run of :func:`semi_async_run`: read by two tests, never changed."""
    return semi_async_run(recipe)


@pytest.mark.parametrize("recipe", ["fedrolex", "heterofl"])
def test_stale_submodel_updates_merge_under_semi_async(recipe):
    rows = uninterrupted_semi_async_run(recipe).history.rows
    assert any(r.get("max_staleness") for r in rows), "the profiles should make some update stale"
    assert not any(r.get("share_changed") for r in rows), "stale submodel updates must merge, not be dropped"
    assert all(r["clients"] for r in rows)


class Crash(Exception):
    """Stands for the process being killed after a round."""


def test_semi_async_fedrolex_resumed_with_updates_in_flight_equals_the_uninterrupted_run(tmp_path):
    from fedcore.engine.checkpoint import Checkpointer, list_checkpoints, read_checkpoint

    full = uninterrupted_semi_async_run("fedrolex")

    def crash(record):
        if record["round"] == 1:
            raise Crash

    with pytest.raises(Crash):
        semi_async_run("fedrolex", Checkpointer(tmp_path, every=1), crash)
    assert read_checkpoint(list_checkpoints(tmp_path)[-1])[0]["runtime"]["in_flight"], "no update was in flight"
    resumed = semi_async_run("fedrolex", Checkpointer(tmp_path, every=1, resume=True))
    assert resumed.history.comparable() == full.history.comparable()
    for k, v in full.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
