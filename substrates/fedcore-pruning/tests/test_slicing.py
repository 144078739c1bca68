"""extract / scatter are exact inverses, and the masked full model answers like the sliced one (spec §6 tests 1-2)."""
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore_pruning import (
    SubmodelSpec,
    ViTShape,
    count_parameters,
    extract,
    head_rows,
    masked_forward,
    scatter,
    trainable_names,
)
from fedcore_pruning.errors import SubmodelMismatchError


def _specs(shape):
    return {
        "full": SubmodelSpec.full(shape),
        "heads+hidden": SubmodelSpec.build(shape, heads=[[0, 2], [1], [3], [0, 1, 2]],
                                           hidden=[[0, 5, 63], list(range(10)), None, [7]]),
        "window+exits+rows": SubmodelSpec.build(
            shape, window_start=1, window_length=2, heads=[[1], [0, 3], [2]], hidden=[[4, 9], None, [1, 2, 3]],
            attn_out=[None, list(range(0, 32, 2)), [5]], mlp_out=[[0, 31], None, list(range(16))],
            classes=[1, 4, 8], exits=[2, 3]),
        "prefix+last": SubmodelSpec.build(shape, window_start=3, window_length=1, heads=[[0]] * 4,
                                          hidden=[[0, 1]] * 4, classes=[9, 0], exits=[4], head=True),
    }


@pytest.mark.parametrize("name", ["full", "heads+hidden", "window+exits+rows", "prefix+last"])
def test_masked_forward_equals_sliced_forward(full, images, shape, name):
    spec = _specs(shape)[name]
    sub = extract(full, spec).eval()
    with torch.no_grad():
        sliced, masked = sub.forward_all(images), masked_forward(full, spec, images)
    assert len(sliced) == len(spec.exits) + int(spec.head) == len(masked)
    for a, b in zip(sliced, masked):
        assert a.shape == (3, len(spec.classes))
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["full", "heads+hidden", "window+exits+rows", "prefix+last"])
def test_extract_then_scatter_is_the_identity_on_kept_elements(full, shape, name):
    spec = _specs(shape)[name]
    sub = extract(full, spec)
    global_state = full.state_dict()
    zeros = {k: torch.zeros_like(v) for k, v in global_state.items()}
    state, written = scatter(sub.state_dict(), spec, into=zeros)
    held = sum(p.numel() for n, p in sub.named_parameters() if not n.startswith("exits."))
    assert sum(int(m.sum()) for m in written.values()) == held
    for k, mask in written.items():
        assert torch.equal(state[k][mask], global_state[k][mask])  # kept elements come back bit-exact
        assert not state[k][~mask].any()  # nothing else was touched
    untouched = set(global_state) - set(written)
    assert all(not state[k].any() for k in untouched)
    back, _ = scatter(sub.state_dict(), spec, into=global_state)
    assert all(torch.equal(back[k], global_state[k]) for k in global_state)


def test_scatter_places_a_changed_submodel_where_it_came_from(full, shape):
    spec = _specs(shape)["window+exits+rows"]
    sub = extract(full, spec)
    with torch.no_grad():
        sub.blocks[1].attn.qkv.weight.add_(1.0)
    state, written = scatter(sub.state_dict(), spec, into=full.state_dict())
    new, old = state["blocks.1.attn.qkv.weight"], full.state_dict()["blocks.1.attn.qkv.weight"]
    rows = head_rows((0, 3), shape.head_dim, shape.num_heads)
    others = [r for r in range(96) if r not in set(rows.tolist())]
    assert torch.equal(new[rows], sub.blocks[1].attn.qkv.weight)
    assert not torch.equal(new[rows], old[rows])
    assert torch.equal(new[others], old[others])
    assert written["blocks.1.attn.qkv.weight"].sum() == len(rows) * 32


def test_head_rows_follow_timm_qkv_layout(shape):
    w = torch.arange(3 * shape.embed_dim).float()
    per_head = w.reshape(3, shape.num_heads, shape.head_dim)  # timm: reshape(B, N, 3, heads, head_dim)
    rows = head_rows((1, 3), shape.head_dim, shape.num_heads)
    assert torch.equal(w[rows], per_head[:, [1, 3]].reshape(-1))


def test_frozen_prefix_gets_no_gradient_and_is_counted_frozen(full, shape, images):
    spec = _specs(shape)["window+exits+rows"]
    sub = extract(full, spec).train()
    sum(o.sum() for o in sub.forward_all(images)).backward()
    frozen = {n for n, p in sub.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in sub.named_parameters()
                      if n.startswith(("blocks.0.", "patch_embed", "cls_", "pos_"))}
    assert all(p.grad is None for n, p in sub.named_parameters() if n in frozen)
    assert all(p.grad is not None for n, p in sub.named_parameters() if n not in frozen)
    assert trainable_names(spec) == {n for n in sub.state_dict() if n not in frozen and not n.startswith("exits.")}
    assert count_parameters(sub).frozen == sum(p.numel() for n, p in sub.named_parameters() if n in frozen)


def test_exits_start_from_the_global_head(full, shape):
    spec = _specs(shape)["window+exits+rows"]
    sub = extract(full, spec)
    assert torch.equal(sub.exits["2"].head.weight, full.head.weight[[1, 4, 8]])
    assert torch.equal(sub.exits["3"].norm.bias, full.norm.bias)


def test_scatter_refuses_mismatched_updates_and_writes_nothing(full, shape):
    spec = _specs(shape)["heads+hidden"]
    sub_state = extract(full, spec).state_dict()
    global_state = full.state_dict()
    before = {k: v.clone() for k, v in global_state.items()}
    wrong_spec = _specs(shape)["full"]
    with pytest.raises(SubmodelMismatchError,
                       match="blocks.0.attn.qkv.weight has shape \\(48, 32\\); .* needs \\(96, 32\\)"):
        scatter(sub_state, wrong_spec, into=global_state)
    with pytest.raises(SubmodelMismatchError, match="does not hold"):
        scatter(sub_state | {"blocks.9.mlp.fc1.bias": torch.zeros(3)}, spec, into=global_state)
    with pytest.raises(SubmodelMismatchError, match="no counterpart"):
        scatter(sub_state, spec, into={k: v for k, v in global_state.items() if k != "head.bias"})
    assert all(torch.equal(before[k], global_state[k]) for k in before)


def test_extract_refuses_a_global_model_of_another_shape(full, shape):
    other = ViTShape(img_size=8, patch_size=2, in_chans=3, num_classes=10, embed_dim=32, depth=4, num_heads=4,
                     mlp_hidden=48)
    with pytest.raises(ConfigError, match="mlp.fc1.weight gives shape"):
        extract(full, SubmodelSpec.full(other))
    with pytest.raises(ConfigError, match="lacks"):
        extract({"cls_token": full.cls_token}, SubmodelSpec.full(shape))


def test_extract_keeps_the_global_dtype_and_masked_forward_follows_it(full, shape, images):
    spec = _specs(shape)["window+exits+rows"]
    double = full.double()
    sub = extract(double, spec)
    assert all(p.dtype == torch.float64 for p in sub.parameters())
    with torch.no_grad():
        for a, b in zip(sub.forward_all(images.double()), masked_forward(double, spec, images.double())):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
