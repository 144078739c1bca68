"""PrunableViT holds timm VisionTransformer weights and answers like it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore_pruning import BlockMasks, PrunableViT, SubmodelSpec, ViTShape, extract

if TYPE_CHECKING:
    from timm.models.vision_transformer import VisionTransformer


def _timm_vit(**kw) -> VisionTransformer:
    from timm.models.vision_transformer import VisionTransformer  # imported here: light at collection

    torch.manual_seed(0)
    args = dict(img_size=16, patch_size=4, in_chans=3, num_classes=7, embed_dim=48, depth=3, num_heads=6, mlp_ratio=2.0)
    return VisionTransformer(**(args | kw)).eval()


def test_timm_state_dict_loads_and_outputs_match():
    vit = _timm_vit()
    with torch.no_grad():  # timm initialises biases to zero; perturb them so that every tensor matters
        for p in vit.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model = PrunableViT.from_timm(vit).eval()
    assert attrs.asdict(model.shape) == attrs.asdict(ViTShape.from_timm(vit))
    assert set(model.state_dict()) == set(vit.state_dict())
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), vit(x), atol=1e-6, rtol=0)


def test_timm_shape_is_read_from_the_model():
    s = ViTShape.from_timm(_timm_vit())
    assert (s.img_size, s.patch_size, s.embed_dim, s.depth, s.num_heads, s.mlp_hidden, s.num_classes) == \
        (16, 4, 48, 3, 6, 96, 7)
    assert s.head_dim == 8 and s.num_tokens == 17


@pytest.mark.parametrize("kw, feature", [(dict(global_pool="avg"), "global_pool"),
                                         (dict(init_values=0.1), "layer scale"),
                                         (dict(qkv_bias=False), "qkv_bias"), (dict(reg_tokens=1), "reg_tokens")])
def test_unsupported_timm_variants_are_refused_by_name(kw, feature):
    with pytest.raises(ConfigError, match=feature):
        ViTShape.from_timm(_timm_vit(**kw))


def test_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match="not divisible by num_heads"):
        ViTShape(embed_dim=30, num_heads=4)
    with pytest.raises(ConfigError, match="img_size"):
        ViTShape(img_size=10, patch_size=4)
    with pytest.raises(ConfigError, match="depth"):
        ViTShape(depth=0)


def test_unit_masks_change_nothing_and_pass_gradients(full, images):
    ones = [BlockMasks(heads=torch.ones(4, requires_grad=True), hidden=torch.ones(64), attn_out=torch.ones(32),
                       mlp_out=torch.ones(32)) for _ in range(4)]
    torch.testing.assert_close(full(images, ones), full(images), atol=1e-6, rtol=0)
    full(images, ones).square().sum().backward()
    assert all(m.heads.grad is not None and m.heads.grad.abs().sum() > 0 for m in ones)


def test_masks_must_cover_every_block_with_the_right_shape(full, images):
    with pytest.raises(ConfigError, match="masks has 2 entries; this model holds 4 blocks"):
        full(images, [None, None])
    with pytest.raises(ConfigError, match=r"block 2 mask hidden has shape \(63,\); .* must have shape \(64,\)"):
        full(images, [None, None, BlockMasks(hidden=torch.ones(63)), None])


def test_prefix_masks_that_require_grad_get_gradients_while_prefix_weights_stay_frozen(full, shape, images):
    spec = SubmodelSpec.build(shape, window_start=2, window_length=1, exits=[3])
    sub = extract(full, spec)
    masks = [BlockMasks(heads=torch.ones(4, requires_grad=True)) for _ in range(3)]
    sub(images, masks).sum().backward()
    assert all(m.heads.grad is not None and m.heads.grad.abs().sum() > 0 for m in masks)
    assert all(p.grad is None for n, p in sub.named_parameters() if n.startswith(("blocks.0.", "blocks.1.")))
    plain = extract(full, spec)
    plain(images, [BlockMasks(heads=torch.ones(4))] * 3).sum().backward()
    assert all(p.grad is None for n, p in plain.named_parameters() if n.startswith(("blocks.0.", "blocks.1.")))
