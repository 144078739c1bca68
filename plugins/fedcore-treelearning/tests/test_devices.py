"""Split points for real device profiles: the runtime's Tree Learning tiers, memory caps, memory errors."""
from __future__ import annotations

import pytest
import torch

from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, ResourceError, presets
from fedcore_treelearning import (
    SplitProblem,
    branch_and_bound,
    exhaustive,
    profile_model,
)


@pytest.fixture(scope="module")
def vit_profile():
    import timm  # imported here: light at collection (docs/testing.md)

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=4,
                              embed_dim=32, num_heads=2, num_classes=10)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield profile_model(model, torch.randn(2, 3, 32, 32))
    torch.set_num_threads(before)


def test_problem_from_tl_tiers_uses_training_flops_batch_bytes_and_uplink(vit_profile):
    tiers = presets()
    devices = [tiers["tl-high"], tiers["tl-low"], tiers["tl-medium"], tiers["tl-low"]]
    p = SplitProblem.from_devices(vit_profile, devices, server_flops=50e9, batch_size=32)
    assert p.unit_flops == tuple(32 * (u.forward_flops + u.backward_flops) for u in vit_profile.units)
    assert p.feature_bytes == tuple(32 * u.output_bytes for u in vit_profile.units)
    assert p.client_speeds == (2e9, 0.5e9, 1e9, 0.5e9)
    assert p.client_bandwidths == (20e6 / 8,) * 4
    assert p.max_splits == (vit_profile.n_units,) * 4  # a micro ViT fits every tier
    assert "profile 'tl-low'" in p.client_name(1)
    solution = branch_and_bound(p)
    assert solution.time == exhaustive(p).time
    low, medium, high = solution.splits[1], solution.splits[2], solution.splits[0]
    assert solution.splits[3] <= medium <= high and low <= medium


def test_memory_caps_the_split(vit_profile):
    fits_two_units = vit_profile.client_memory_bytes(3, batch_size=16)
    small = DeviceProfile(name="small", flops=50e9, up_bps=1e3, down_bps=1e3, memory_bytes=fits_two_units)
    p = SplitProblem.from_devices(vit_profile, [small], server_flops=1e9, batch_size=16)
    assert p.max_splits == (3,)
    # a fast client on a slow link next to a slow server wants to keep everything; memory stops it at 3
    assert exhaustive(p, monotone=False).splits == (3,) == branch_and_bound(p).splits
    with pytest.raises(ResourceError, match=r"split 4 of client 0 \(profile 'small'\) does not fit its memory"):
        branch_and_bound(p, init=(4,))


def test_a_device_that_cannot_hold_the_smallest_part_is_one_clear_error(vit_profile):
    need = vit_profile.client_memory_bytes(2, batch_size=8)
    pico = DeviceProfile(name="pico", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=need - 1)
    with pytest.raises(ResourceError, match=rf"client 1 \(profile 'pico'\) cannot hold even the smallest client part "
                                            rf"\(unit 1 'stem' of a VisionTransformer, batch 8\): it needs {need} "
                                            rf"bytes, the device has {need - 1} bytes"):
        SplitProblem.from_devices(vit_profile, [presets()["tl-high"], pico], server_flops=1e9, batch_size=8)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size=0 must be an int >= 1"),
    ({"batch_size": 8, "devices": []}, "devices is empty"),
])
def test_bad_device_inputs(vit_profile, kwargs, message):
    kwargs = {"devices": [presets()["tl-low"]], **kwargs}
    with pytest.raises(ConfigError, match=message):
        SplitProblem.from_devices(vit_profile, kwargs.pop("devices"), server_flops=1e9, **kwargs)
