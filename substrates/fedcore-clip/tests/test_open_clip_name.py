"""``open_clip``: the one config name of a CLIP model (``prompted-clip`` is its deprecated alias), with
``pretrained`` an open_clip tag, a checkpoint file read without running code, or nothing; built on the meta device
it costs no memory (the planner's parameter counts)."""
from __future__ import annotations

import os

import pytest
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.experiment import load_config, materialize, plan
from fedcore_clip.testing import one_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def built(**model):
    cfg = load_config(None, base={
        "rounds": 1, "num_clients": 2, "recipe": "promptfl",
        "dataset": {"name": "clip.shapes", "n_train_per_class": 2, "n_test_per_class": 1, "num_classes": 3},
        "model": {"name": "open_clip", "n_ctx": 4, **model}})
    return materialize(plan(cfg))


def test_a_checkpoint_file_loads_the_backbone_tensor_for_tensor(tmp_path):
    from safetensors.torch import save_file

    source = built(seed=3).model.backbone.model.state_dict()
    path = tmp_path / "tiny-clip.safetensors"
    save_file({k: v.contiguous() for k, v in source.items()}, str(path))
    m = built(pretrained=str(path))
    loaded = m.model.backbone.model.state_dict()
    assert m.resolved["model"]["pretrained"] == str(path)
    assert all(torch.equal(loaded[k], v) for k, v in source.items())
    assert not torch.equal(built().model.backbone.model.state_dict()["positional_embedding"],
                           source["positional_embedding"])  # seed 0's random backbone differs: the test can fail


def test_a_checkpoint_that_would_run_code_is_refused_and_a_missing_one_named(tmp_path):
    marker = tmp_path / "ran"

    class RunsCode:
        def __reduce__(self):
            return os.makedirs, (str(marker),)

    path = tmp_path / "clip.pt"
    torch.save({"state_dict": {"logit_scale": torch.zeros(())}, "x": RunsCode()}, path)
    with pytest.raises(ConfigError) as info:
        built(pretrained=str(path))
    assert f"refused to load {path}: it is not a weights-only checkpoint" in str(info.value)
    assert "\n" not in str(info.value) and not marker.exists()
    with pytest.raises(ConfigError) as info:
        built(pretrained=str(tmp_path / "gone.safetensors"))
    assert str(info.value) == (f"model open_clip: pretrained = '{tmp_path / 'gone.safetensors'}': the "
                               f"weights file {tmp_path / 'gone.safetensors'} does not exist")


def test_prompted_clip_is_a_deprecated_name_for_the_same_model():
    with pytest.warns(DeprecationWarning, match='"prompted-clip" is now called "open_clip"'):
        old = materialize(plan(load_config(None, base={
            "rounds": 1, "num_clients": 2, "recipe": "promptfl",
            "dataset": {"name": "clip.shapes", "n_train_per_class": 2, "n_test_per_class": 1, "num_classes": 3},
            "model": {"name": "prompted-clip", "n_ctx": 4}})))
    new = built()
    assert old.resolved["model"] == dict(new.resolved["model"], name="prompted-clip")  # old runs keep their fingerprint
    assert torch.equal(old.model.prompt.ctx, new.model.prompt.ctx)
    assert fedcore.plugins.lookup("prompted-clip", kind="model").help.startswith("``prompted-clip``: the ``open_clip``")


def test_vit_b_16_builds_on_the_meta_device_without_weights_or_memory():
    """open_clip ViT-B/16: 149.6M parameters (image and text towers), the frozen backbone of the prompt methods."""
    factory = fedcore.plugins.lookup("open_clip", kind="model").obj
    with torch.device("meta"):
        model = factory(classnames=["a cat", "a dog"], arch="ViT-B-16", pretrained=False, n_ctx=16)
    assert sum(p.numel() for p in model.backbone.parameters()) == 149_620_737
    assert model.prompt.ctx.shape == (16, 512)
    assert {p.device.type for p in model.parameters()} == {"meta"}
