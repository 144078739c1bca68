"""Spec 004 §6 tests 6 (Eq. 4 γ by hand) and 7 (Eq. 5 with two clients), and bad updates: one error, nothing merged."""
import attrs
import pytest
import torch

from fedcore.contexts import RoundContext, RunContext
from fedcore.types import ClientUpdate, ServerState
from fedcore_cos2p import Cos2pAggregate, gamma, segment_ids
from fedcore_cos2p.submodel import SUBMODEL, Cos2pSubmodel
from fedcore_pruning import PrunableViT, SubmodelMismatchError, SubmodelSpec, ViTShape, extract

SHAPE = ViTShape(img_size=8, patch_size=4, embed_dim=8, depth=2, num_heads=2, mlp_hidden=8, num_classes=3)


def test_eq4_gamma_matches_the_hand_example():
    delta = torch.tensor([0.1, -0.1, 0.2, 0.0])
    mask = torch.ones(4, dtype=torch.bool)
    seg = torch.zeros(4, dtype=torch.long)
    drift = torch.tensor([0.1, 0.1, 0.1, -0.1])  # L1 0.4
    assert torch.allclose(gamma(delta, drift, mask, seg, 1), torch.full((4,), 0.4 / 4.4))
    assert torch.allclose(gamma(delta, torch.zeros(4), mask, seg, 1), torch.full((4,), 0.1))  # τ = 0: no drift
    half = torch.tensor([True, True, False, False])  # only trained elements count, in the norm and in size()
    assert torch.allclose(gamma(delta, drift, half, seg, 1), torch.full((4,), 0.2 / 2.2))


def test_segments_are_heads_of_qkv_rows_of_proj_fc1_fc2_and_whole_other_tensors():
    seg, n = segment_ids("blocks.0.attn.qkv.weight", (24, 8), SHAPE)
    assert n == 2 and seg[:, 0].tolist() == ([0] * 4 + [1] * 4) * 3
    seg, n = segment_ids("blocks.1.mlp.fc2.weight", (8, 8), SHAPE)
    assert n == 8 and seg[3].unique().tolist() == [3]
    assert segment_ids("blocks.0.norm1.weight", (8,), SHAPE)[1] == 1


def model():
    torch.manual_seed(0)
    return PrunableViT(SHAPE)


def ctx(m):
    return RoundContext(round=1, seed=0, run=RunContext(seed=0, num_clients=2, rounds=2, train=None,
                                                        server=ServerState(model=m)))


def client_update(m, spec, cid, step, *, staleness=0):
    """A submodel trained by adding ``step`` to every trainable element, as the share would upload it."""
    sub = extract(m.state_dict(), spec)
    base = {k: v.clone() for k, v in sub.state_dict().items() if not k.startswith("exits.")}
    names = [k for k, p in sub.named_parameters() if p.requires_grad and not k.startswith("exits.")]
    tensors = {k: base[k] - step if k in names else base[k] for k in base}
    teacher = {f"exits.{spec.exits[-1]}.{leaf}": v for leaf, v in
               (("norm.weight", torch.ones(8)), ("norm.bias", torch.zeros(8)),
                ("head.weight", torch.full((3, 8), float(cid))), ("head.bias", torch.zeros(3)))}
    meta = {SUBMODEL: Cos2pSubmodel(spec=spec, phase="weight", budget=1.0, width=1.0, offsets=[spec.exits[-1]],
                                    teacher=spec.exits[-1], residual_masks=True, budget_counts_inputs=True,
                                    mask_init=3.0)}
    return ClientUpdate(client_id=cid, tensors={**{k: tensors[k] for k in names}, **teacher},
                        base={k: base[k] for k in names}, num_examples=10 + cid, meta=meta, staleness=staleness)


def test_eq5_overlap_is_weighted_disjoint_takes_its_client_untouched_stays():
    m = model()
    a = SubmodelSpec.build(SHAPE, window_start=0, window_length=1, heads=[[0]], hidden=[[0, 1, 2, 3]], exits=[1],
                           head=False)
    b = SubmodelSpec.build(SHAPE, window_start=0, window_length=1, heads=[[0, 1]], hidden=[[2, 3, 4, 5]], exits=[1],
                           head=False)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    result = Cos2pAggregate(weighting="uniform").fedcore_aggregate(
        model=m, updates=[client_update(m, a, 0, 0.1), client_update(m, b, 1, 0.3)], ctx=ctx(m))
    fc1 = before["blocks.0.mlp.fc1.weight"] - result.state["blocks.0.mlp.fc1.weight"]  # = Δ merged
    assert torch.allclose(fc1[0:2], torch.full((2, 8), 0.1))  # only client a
    assert torch.allclose(fc1[2:4], torch.full((2, 8), 0.2))  # both: the mean of 0.1 and 0.3
    assert torch.allclose(fc1[4:6], torch.full((2, 8), 0.3))  # only client b
    assert torch.equal(fc1[6:], torch.zeros(2, 8))  # nobody
    assert torch.equal(result.state["blocks.1.attn.qkv.weight"], before["blocks.1.attn.qkv.weight"])  # removed block
    # the eval head is the sample-weighted mean of the deepest exits: (10*0 + 11*1) / 21
    assert torch.allclose(result.state["head.weight"], torch.full((3, 8), 11 / 21))
    gamma_run = Cos2pAggregate().fedcore_aggregate(
        model=m, updates=[client_update(m, a, 0, 0.1), client_update(m, b, 1, 0.3)], ctx=ctx(m))
    fc1 = before["blocks.0.mlp.fc1.weight"] - gamma_run.state["blocks.0.mlp.fc1.weight"]
    # γ ∝ |Δ| with no drift: the overlap is (0.1·0.1 + 0.3·0.3) / (0.1 + 0.3) = 0.25, disjoint rows as before
    assert torch.allclose(fc1[2:4], torch.full((2, 8), 0.25), atol=1e-6)
    assert torch.allclose(fc1[0:2], torch.full((2, 8), 0.1)) and torch.allclose(fc1[4:6], torch.full((2, 8), 0.3))
    assert gamma_run.metrics["staleness_0"] == 2.0


def test_an_update_whose_index_map_does_not_match_the_global_model_is_refused_and_nothing_merges():
    m = model()
    spec = SubmodelSpec.build(SHAPE, window_start=0, window_length=1, exits=[1], head=False)
    good = client_update(m, spec, 0, 0.1)
    other = ViTShape(img_size=8, patch_size=4, embed_dim=8, depth=2, num_heads=2, mlp_hidden=16, num_classes=3)
    wrong = attrs.evolve(good, client_id=1, meta={SUBMODEL: attrs.evolve(good.meta[SUBMODEL],
                                                                         spec=SubmodelSpec.full(other))})
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(SubmodelMismatchError, match="cut from a ViT of shape"):
        Cos2pAggregate().fedcore_aggregate(model=m, updates=[good, wrong], ctx=ctx(m))
    bad_shape = attrs.evolve(good, client_id=1, tensors={**good.tensors, "blocks.0.mlp.fc1.weight": torch.zeros(3, 8)},
                             base={**good.base, "blocks.0.mlp.fc1.weight": torch.zeros(3, 8)})
    with pytest.raises(SubmodelMismatchError, match="fc1.weight"):
        Cos2pAggregate().fedcore_aggregate(model=m, updates=[good, bad_shape], ctx=ctx(m))
    narrow = SubmodelSpec.build(SHAPE, window_start=0, window_length=1, heads=[[1]], exits=[1], head=False)
    no_meta = attrs.evolve(client_update(m, narrow, 0, 0.1), meta={})  # sliced tensors without their description
    with pytest.raises(SubmodelMismatchError, match="no Co-S2P submodel description.*does not fit"):
        Cos2pAggregate().fedcore_aggregate(model=m, updates=[no_meta], ctx=ctx(m))
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
