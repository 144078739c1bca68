"""Any timm architecture by name (``model = { name = "timm", ... }``): weights from a local file or the hub cache,
loaded without running code; one line for every failure; seeded random init; builds on the meta device.

Every model here is a ViT of width 16 on 8x8 single-channel inputs (timm's ``vit_tiny_patch16_224`` with its
sizes passed through), except the meta-device builds, which cost no memory.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="needs timm")
"""Looked up, not imported: importing timm costs ~2 CPU-s, paid by the test that builds a model, not at collection."""

from fedcore.cli import main  # noqa: E402
from fedcore.errors import ConfigError  # noqa: E402
from fedcore.experiment import load_config, materialize, plan  # noqa: E402
from fedcore.models import timm_model  # noqa: E402

TINY = {"name": "timm", "arch": "vit_tiny_patch16_224", "img_size": 8, "patch_size": 2, "in_chans": 1,
        "depth": 1, "embed_dim": 16, "num_heads": 2}
"""timm's ViT-Tiny at 8x8, one block of width 16: about 3k parameters."""


def config(seed: int = 0, num_classes: int = 4, **model) -> dict:
    return load_config(None, base={
        "seed": seed, "rounds": 1, "num_clients": 2,
        "dataset": {"name": "synthetic", "n": 16, "n_test": 8, "num_classes": num_classes},
        "model": {**TINY, **model}})


def built(**kwargs) -> torch.nn.Module:
    return materialize(plan(config(**kwargs))).model


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message, message
    return message


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_weights_saved_to_a_file_load_by_config_tensor_for_tensor(tmp_path, suffix):
    from safetensors.torch import save_file

    source = built(seed=1)
    path = tmp_path / f"vit{suffix}"
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    if suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save({"state_dict": state, "epoch": 3}, path)  # a training checkpoint nests its weights
    m = materialize(plan(config(seed=2, pretrained=str(path))))
    loaded = m.model.state_dict()
    assert list(loaded) == list(state)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert m.resolved["model"]["pretrained"] == str(path)
    for cfg in (m.model.pretrained_cfg, m.model.default_cfg):  # timm's cfg names the file, holds no second copy
        assert cfg["file"] == str(path) and "state_dict" not in cfg
    assert not torch.equal(built(seed=2).state_dict()["blocks.0.attn.qkv.weight"], state["blocks.0.attn.qkv.weight"])


def test_another_num_classes_gets_a_fresh_seeded_head_and_keeps_the_body(tmp_path):
    from safetensors.torch import save_file

    source = built(seed=1, num_classes=4)
    path = tmp_path / "vit.safetensors"
    save_file(source.state_dict(), str(path))
    three = built(seed=5, num_classes=3, pretrained=str(path))
    assert three.head.out_features == 3
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("head.")}
    assert all(torch.equal(three.state_dict()[k], v) for k, v in body.items())
    again = built(seed=5, num_classes=3, pretrained=str(path))
    other = built(seed=6, num_classes=3, pretrained=str(path))
    assert torch.equal(again.head.weight, three.head.weight)  # the fresh head is drawn from the run's seed
    assert not torch.equal(other.head.weight, three.head.weight)


def test_a_pickle_that_would_run_code_is_refused_and_never_run(tmp_path):
    """``os.makedirs(marker)`` would run on unpickling; torch's weights-only reader refuses it before any call."""
    marker = tmp_path / "the-pickle-ran"

    class RunsCode:
        def __reduce__(self):
            return os.makedirs, (str(marker),)

    path = tmp_path / "evil.pth"
    torch.save({"head.weight": torch.zeros(4, 16), "payload": RunsCode()}, path)
    message = one_line_error(lambda: materialize(plan(config(pretrained=str(path)))))
    assert message.startswith(f"model timm: refused to load {path}: it is not a weights-only checkpoint")
    assert "posix.makedirs" in message or "os.makedirs" in message
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the same file, read the unsafe way, does run it: the test can fail
    assert marker.is_dir()


def test_the_same_seed_gives_the_same_random_init_and_another_seed_another():
    a, b, c = built(seed=3), built(seed=3), built(seed=4)
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    assert not torch.equal(a.state_dict()["blocks.0.mlp.fc1.weight"], c.state_dict()["blocks.0.mlp.fc1.weight"])


def test_every_mistake_is_one_line_naming_it(tmp_path):
    assert one_line_error(lambda: built(arch="vit_tiny_patch16_22")) == (
        "model timm: timm architecture 'vit_tiny_patch16_22' does not exist; close matches: vit_tiny_patch16_224, "
        "deit_tiny_patch16_224, vit_tiny_patch16_384, vit_giant_patch14_224, eva02_tiny_patch14_224")
    assert one_line_error(lambda: built(drop_pth_rate=0.1)) == (
        "model timm: timm architecture 'vit_tiny_patch16_224' does not take the setting 'drop_pth_rate' "
        "(timm.create_model passes it to the model's constructor, which refused it)")
    missing = tmp_path / "nowhere" / "vit.safetensors"
    assert one_line_error(lambda: built(pretrained=str(missing))) == (
        f"model timm: pretrained = {str(missing)!r}: the weights file {missing} does not exist")
    assert "no pretrained tag 'nope'; its tags: augreg_in21k, augreg_in21k_ft_in1k" in one_line_error(
        lambda: built(arch="vit_tiny_patch16_224.nope"))
    assert "pretrained = 'imagenet' is neither true, false nor a weights file" in one_line_error(
        lambda: built(pretrained="imagenet"))
    assert one_line_error(lambda: plan(config(pretrained=3))) == (
        "model timm.pretrained = 3 has type integer; expected bool or str")
    no_arch = config()
    del no_arch["model"]["arch"]
    assert one_line_error(plan, no_arch) == "model timm: missing required setting 'arch'"


def test_weights_for_another_architecture_are_one_line(tmp_path):
    from safetensors.torch import save_file

    save_file(built(depth=2).state_dict(), str(tmp_path / "deep.safetensors"))
    message = one_line_error(lambda: built(pretrained=str(tmp_path / "deep.safetensors")))
    assert message.startswith(f"model timm: the weights in {tmp_path / 'deep.safetensors'} do not fit timm "
                              f"vit_tiny_patch16_224")
    assert 'with these settings: Unexpected key(s) in state_dict: "blocks.1.' in message


def _hub_cache(root: Path, repo: str, state: dict) -> None:
    """A Hugging Face hub cache holding ``model.safetensors`` of ``repo`` (the layout huggingface_hub reads)."""
    from safetensors.torch import save_file

    commit = "0" * 40
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    save_file(state, str(folder / "snapshots" / commit / "model.safetensors"))


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """huggingface_hub offline with an empty cache in tmp_path, as HF_HUB_OFFLINE=1 and HF_HOME set it at import."""
    import huggingface_hub.constants

    cache = tmp_path / "hf" / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return cache


def test_pretrained_true_reads_the_hub_cache_and_adapts_the_head(offline_hub):
    """timm's own hub loading finds weights in the cache (here: weights this test wrote for ``test_vit``)."""
    torch.manual_seed(0)
    source = timm_model(arch="test_vit").state_dict()
    _hub_cache(offline_hub, "timm/test_vit.r160_in1k", source)
    same = timm_model(arch="test_vit", pretrained=True)
    assert all(torch.equal(same.state_dict()[k], v) for k, v in source.items())
    ten = timm_model(arch="test_vit", pretrained=True, num_classes=10)
    assert ten.get_classifier().out_features == 10
    assert all(torch.equal(ten.state_dict()[k], v) for k, v in source.items() if not k.startswith("head."))


def test_weights_neither_cached_nor_reachable_are_one_line_naming_arch_tag_and_cache(offline_hub):
    message = one_line_error(timm_model, arch="test_vit", pretrained=True)
    assert message.startswith(f"pretrained weights of timm test_vit (tag r160_in1k) are neither cached nor "
                              f"reachable: looked in the Hugging Face hub cache {offline_hub} for "
                              f"timm/test_vit.r160_in1k (LocalEntryNotFoundError")
    assert "HF_HUB_OFFLINE is set" in message
    assert "timm has no pretrained weights for 'vit_tiny_patch16_224.nope'" not in message
    assert one_line_error(timm_model, arch="test_vit.bad", pretrained=True) == (
        "timm architecture 'test_vit' has no pretrained tag 'bad'; its tags: r160_in1k")


OFFLINE_RUN = """
rounds = 1
num_clients = 2
dataset = { name = "synthetic", n = 16, n_test = 8 }
model = { name = "timm", arch = "deit_small_patch16_224", pretrained = true }
"""


@pytest.mark.integration
def test_fedcore_run_offline_with_an_empty_cache_says_one_line(tmp_path):
    """The real environment variables, read by huggingface_hub when it is imported (hence a fresh process)."""
    path = tmp_path / "deit.toml"
    path.write_text(OFFLINE_RUN)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), TORCH_HOME=str(tmp_path / "torch"))
    env.pop("HF_HUB_CACHE", None)
    proc = subprocess.run([sys.executable, "-m", "fedcore", "run", str(path), "--out", str(tmp_path / "run"),
                           "--progress", "none"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert ("model timm: pretrained weights of timm deit_small_patch16_224 (tag fb_in1k) are neither cached nor "
            f"reachable: looked in the Hugging Face hub cache {tmp_path / 'hf' / 'hub'} for "
            "timm/deit_small_patch16_224.fb_in1k") in lines[0]


@pytest.mark.parametrize("arch, params", [("deit_small_patch16_224", 22_050_664), ("vit_base_patch16_224", 86_567_656)])
def test_paper_architectures_build_on_the_meta_device(arch, params):
    """DeiT-S 22.05M and ViT-B/16 86.6M parameters (1000-class head), built without memory, weights or network."""
    with torch.device("meta"):
        model = timm_model(arch=arch, pretrained=False)
    assert sum(p.numel() for p in model.parameters()) == params
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_describe_timm_shows_every_setting_with_help(capsys):
    assert main(["describe", "timm", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in info["settings"]}
    assert list(rows) == ["arch", "pretrained", "num_classes", "**kwargs", "lora"]
    assert rows["arch"]["required"] and "timm.list_models()" in rows["arch"]["help"]
    assert "loaded without running code" in rows["pretrained"]["help"]
    assert "img_size" in rows["**kwargs"]["help"] and "drop_path_rate" in rows["**kwargs"]["help"]
    assert rows["lora"]["allowed"] == "r, alpha, target_modules, dropout"
