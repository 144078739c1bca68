"""The layer profiler: exact FLOPs on Linear layers, a micro ViT and ResNet cut into units, bad models."""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore_treelearning import partition_units, profile_model


def micro_vit(embed_dim: int = 32, depth: int = 3) -> nn.Module:
    import timm  # the tests import timm, not the module: light at collection (docs/testing.md)

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=depth,
                             embed_dim=embed_dim, num_heads=2, num_classes=10)


@functools.cache
def micro_vit_profile():
    """The default micro ViT profiled on a batch of two: read by the client-memory tests, never changed."""
    return profile_model(micro_vit(), torch.randn(2, 3, 32, 32))


def test_linear_sequential_matches_analytic_flops_exactly():
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4), nn.Linear(4, 2))
    profile = profile_model(model, torch.randn(3, 8))
    # forward of Linear(i, o): 2*i*o per sample. Backward: weight gradient 2*i*o, plus the input gradient
    # 2*i*o for every unit but the first (its input is data, which needs no gradient).
    assert [u.forward_flops for u in profile.units] == [2 * 8 * 16, 2 * 16 * 4, 2 * 4 * 2]
    assert [u.backward_flops for u in profile.units] == [2 * 8 * 16, 4 * 16 * 4, 4 * 4 * 2]
    assert [u.output_bytes for u in profile.units] == [16 * 4, 4 * 4, 2 * 4]
    assert [u.params for u in profile.units] == [8 * 16 + 16, 16 * 4 + 4, 4 * 2 + 2]
    assert [u.param_bytes for u in profile.units] == [4 * u.params for u in profile.units]
    assert profile.input_bytes == 8 * 4 and profile.batch_size == 3 and profile.n_units == 3


def test_profiler_leaves_the_model_untouched():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    before = [p.detach().clone() for p in model.parameters()]
    profile_model(model, torch.randn(3, 8))
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_micro_vit_units_are_the_stem_blocks_and_head():
    model = micro_vit().eval()
    units = partition_units(model)
    assert [name for name, _ in units] == ["stem", "blocks.0", "blocks.1", "blocks.2", "head"]
    x = torch.randn(2, 3, 32, 32)
    h = x
    for _, unit in units:
        h = unit(h)
    assert torch.equal(h, model(x))  # the units compose to the model
    assert sum(sum(p.numel() for p in u.parameters()) for _, u in units) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variant", [{"global_pool": "map"}, {"dynamic_img_size": True}, {"reg_tokens": 2},
                                     {"global_pool": "avg", "class_token": False}, {"no_embed_class": True}])
def test_vit_variants_compose_and_own_every_parameter(variant):
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                              embed_dim=32, num_heads=2, num_classes=10, **variant).eval()
    x = torch.randn(2, 3, 32, 32)
    h = x
    for _, unit in partition_units(model):
        h = unit(h)
    assert torch.equal(h, model(x))


def test_a_part_no_unit_owns_is_one_clear_error():
    from timm.models.resnet import BasicBlock, ResNet

    model = ResNet(block=BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), num_classes=10)
    model.extra = nn.Linear(2, 2)  # not on the forward path the cut knows
    with pytest.raises(ConfigError,
                       match=r"cannot cut this ResNet into units: parameters \['extra.weight', 'extra.bias'\]"):
        partition_units(model)
    shared = nn.Linear(4, 4)
    with pytest.raises(ConfigError, match="shared between units"):
        partition_units(nn.Sequential(shared, nn.ReLU(), shared))


def test_micro_vit_profile_is_positive_and_matches_the_block_formula():
    profile = profile_model(micro_vit(), torch.randn(4, 3, 32, 32))
    assert all(u.forward_flops > 0 and u.backward_flops > 0 and u.output_bytes > 0 and u.params > 0
               for u in profile.units)
    tokens, d = 1 + (32 // 8) ** 2, 32
    # a block per sample: qkv 3d^2 + proj d^2 + mlp 8d^2 matmuls (2 FLOPs per MAC) + attention 4*T^2*d
    block = 2 * tokens * 12 * d * d + 4 * tokens * tokens * d
    assert [u.forward_flops for u in profile.units[1:-1]] == [block] * 3
    assert all(u.backward_flops >= u.forward_flops for u in profile.units[1:-1])
    assert profile.units[0].output_bytes == tokens * d * 4  # the token sequence crosses the split


def test_micro_vit_costs_grow_with_width_and_depth():
    narrow = profile_model(micro_vit(32), torch.randn(2, 3, 32, 32))
    wide = profile_model(micro_vit(64), torch.randn(2, 3, 32, 32))
    for a, b in zip(narrow.units, wide.units):
        assert b.forward_flops > a.forward_flops and b.backward_flops > a.backward_flops and b.params > a.params
    assert profile_model(micro_vit(depth=5), torch.randn(2, 3, 32, 32)).n_units == 7


def test_resnet_is_cut_into_stem_stages_and_head():
    from timm.models.resnet import BasicBlock, ResNet

    torch.manual_seed(0)
    model = ResNet(block=BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), num_classes=10).eval()
    units = partition_units(model)
    assert [name for name, _ in units] == ["stem", "layer1", "layer2", "layer3", "layer4", "head"]
    x = torch.randn(2, 3, 32, 32)
    h = x
    for _, unit in units:
        h = unit(h)
    assert torch.equal(h, model(x))
    profile = profile_model(model, x)
    assert all(u.forward_flops > 0 for u in profile.units)
    # the plain timm stem is 64 channels wide whatever the stage widths; /4 after conv and max-pool
    assert [u.output_bytes for u in profile.units[:5]] == [64 * 8 * 8 * 4, 8 * 8 * 8 * 4, 16 * 4 * 4 * 4,
                                                           32 * 2 * 2 * 4, 64 * 1 * 1 * 4]


@pytest.mark.parametrize("arch, names", [
    ("mobilenetv1_100", ["stem", *(f"blocks.{i}" for i in range(5)), "head"]),        # timm EfficientNet class
    ("mobilenetv3_small_050", ["stem", *(f"blocks.{i}" for i in range(6)), "head"]),  # timm MobileNetV3 class
    ("vgg11", ["stage1", "stage2", "stage3", "stage4", "stage5", "head"]),
])
def test_timm_mobilenets_and_vgg_are_cut_into_stem_stages_and_head(arch, names):
    """The thesis's MobileNet (v1) and VGG11 by timm name (the paper configs under examples/paper/): the units
    compose to the model and own every parameter (the cut checks it), and the stem of MobileNet-v1 is its first
    convolution and batch norm (3 x 3 x 3 x 32 weights + 2 x 32 affine). VGG11's pre-logits ConvMlp is built
    narrow (``mlp_ratio``: its 7 x 7 conv 512 -> 64 channels, not 4096): the same modules in the same places, 11 M
    parameters instead of 133 M, so the cut is checked without drawing 102 M random weights."""
    import timm

    torch.manual_seed(0)
    narrow = {"mlp_ratio": 1 / 64} if arch == "vgg11" else {}
    model = timm.create_model(arch, pretrained=False, num_classes=10, **narrow).eval()
    units = partition_units(model)
    assert [name for name, _ in units] == names
    x = torch.randn(2, 3, 32, 32)
    h = x
    for _, unit in units:
        h = unit(h)
    assert torch.equal(h, model(x))
    if arch == "mobilenetv1_100":
        assert sum(p.numel() for p in units[0][1].parameters()) == 3 * 3 * 3 * 32 + 2 * 32


def test_client_memory_grows_with_the_split():
    profile = micro_vit_profile()
    sizes = [profile.client_memory_bytes(s, batch_size=8) for s in range(2, profile.n_units + 1)]
    assert sizes == sorted(sizes) and sizes[0] > 0
    stem = profile.units[0]
    assert sizes[0] == int(stem.param_bytes + 2 * stem.trainable_bytes + 8 * stem.saved_bytes)


@pytest.mark.parametrize("split", [1, 6])
def test_client_part_outside_the_model_is_one_clear_error(split):
    profile = micro_vit_profile()
    with pytest.raises(ConfigError, match=rf"split={split} is outside the model.*5 units.*2\.\.5"):
        profile.client_memory_bytes(split, batch_size=1)


@pytest.mark.parametrize("model, message", [
    (nn.Linear(4, 2),
     r"cannot cut a model of type torch\.nn\.modules\.linear\.Linear.*supported: timm VisionTransformer"),
    (nn.Sequential(nn.Linear(4, 2)), r"1 unit\(s\) cannot be split"),
])
def test_a_model_that_cannot_be_cut_is_one_clear_error(model, message):
    with pytest.raises(ConfigError, match=message):
        profile_model(model, torch.randn(2, 4))


def test_a_unit_returning_a_tuple_is_one_clear_error():
    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    with pytest.raises(ConfigError, match=r"unit 1 \('0'\) of a Sequential returned tuple"):
        profile_model(nn.Sequential(Pair(), nn.Linear(4, 2)), torch.randn(2, 4))


def test_sample_must_be_a_batch():
    with pytest.raises(ConfigError, match="sample must be a batch tensor"):
        profile_model(nn.Sequential(nn.Linear(4, 2), nn.Linear(2, 2)), torch.tensor(1.0))
