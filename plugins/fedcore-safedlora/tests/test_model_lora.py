"""``[model.lora]`` on a timm model from TOML: the fedlora / sa-fedlora recipes and lora-share inject exactly the
adapters the model table asks for (rank, alpha, targets, dropout), train only them (and the head), and refuse a
setting given differently in two places. The model is timm's ViT-Tiny at 8x8 with one block of width 16."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import fedcore
from fedcore.cli import main
from fedcore.errors import ConfigError
from fedcore.experiment import load_config, materialize, plan
from fedcore.experiment.config import read_toml
from fedcore_lora import ADAPTER, adapter_keys, current_rank, has_lora, lora_layers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="needs timm")
"""Looked up, not imported: importing timm costs ~2 CPU-s, paid by the tests that build a model, not at collection."""
torch.set_num_threads(1)

TOML = """
seed = 0
rounds = 2
num_clients = 2
recipe = "{recipe}"
dataset = {{ name = "synthetic", n = 32, n_test = 16, num_classes = 4 }}

[model]
name = "timm"
arch = "vit_tiny_patch16_224"
img_size = 8
patch_size = 2
in_chans = 1
depth = 1
embed_dim = 16
num_heads = 2

[model.lora]
{lora}

[pipeline]
{update}
{pipeline}
"""
LORA = 'r = 4\nalpha = 8\ntarget_modules = ["qkv", "fc2"]\ndropout = 0.1'
STAGES = "local_update = { e1_local_epochs = 1, e2_local_epochs = 1, batch_size = 8 }"
EPOCHS = "local_update = { epochs = 1, batch_size = 8 }"


def config(tmp_path, recipe="fedlora", lora=LORA, pipeline="", name="c"):
    path = tmp_path / f"{name}.toml"
    update = STAGES if recipe in ("fedlora", "sa-fedlora") else EPOCHS
    path.write_text(TOML.format(recipe=recipe, lora=lora, update=update, pipeline=pipeline))
    return path


class Uploads:
    """Every client's uploaded entry names, by round."""

    def __init__(self):
        self.names: dict[int, set[str]] = {}

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.names.setdefault(ctx.round, set()).update(update.tensors)


def run(path):
    m = materialize(plan(load_config(path)))
    uploads = Uploads()
    pipe = fedcore.Pipeline([*m.plan.pipeline.components, uploads])
    result = pipe.run(model=m.model, train=m.train, test=m.test, **m.run_kwargs)
    return m, result, uploads


def one_line(fn, *args):
    with pytest.raises(ConfigError) as info:
        fn(*args)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_fedlora_from_toml_injects_what_model_lora_says_and_trains_only_it(tmp_path):
    m, result, uploads = run(config(tmp_path))
    model = result.model
    layers = lora_layers(model)
    assert sorted(layers) == ["blocks.0.attn.qkv", "blocks.0.mlp.fc2"]  # peft's reading: names match the last parts
    assert current_rank(model) == 4 and [r["lora_rank"] for r in result.history.rows] == [4, 4]
    for layer in layers.values():
        assert layer.scaling[ADAPTER] == 2.0  # alpha / r
        assert layer.lora_dropout[ADAPTER].p == 0.1
    sent = adapter_keys(model) + ["head.weight", "head.bias"]
    assert uploads.names == {0: set(sent), 1: set(sent)}  # only the factors and the head cross the network
    assert {n for n, p in model.named_parameters() if p.requires_grad} <= set(sent)
    assert m.resolved["model"]["lora"] == {"r": 4, "alpha": 8.0, "target_modules": ["qkv", "fc2"], "dropout": 0.1}


def test_the_resolved_config_and_fingerprint_carry_model_lora(tmp_path, capsys):
    path = config(tmp_path)
    assert main(["describe", str(path), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["config"]["model"]["lora"] == {"r": 4, "alpha": 8.0, "target_modules": ["qkv", "fc2"],
                                                    "dropout": 0.1}
    assert main(["describe", str(path)]) == 0
    assert "[model.lora]" in capsys.readouterr().out
    fingerprints = {plan(load_config(config(tmp_path, lora=lora, name=str(i)))).fingerprint
                    for i, lora in enumerate([LORA, LORA.replace("r = 4", "r = 2"), LORA.replace("0.1", "0.0")])}
    assert len(fingerprints) == 3


def test_fedlora_takes_its_fixed_rank_from_the_model_and_defaults_to_eight(tmp_path):
    """``fedlora``'s plan has ``r_a = r_b = 0`` (the model's rank): with no ``r`` it runs exactly as the explicit
    rank 8 it always had."""
    default = config(tmp_path, lora='target_modules = "all-linear"', name="default")
    explicit = config(tmp_path, lora='target_modules = "all-linear"', name="explicit",
                      pipeline='plugins = [{ name = "sa-fedlora-plan", r_a = 8, r_b = 8 }]')
    _, a, _ = run(default)
    _, b, _ = run(explicit)
    assert current_rank(a.model) == 8
    assert a.history.column("test_accuracy") == b.history.column("test_accuracy")
    assert all(torch.equal(v, b.model.state_dict()[k]) for k, v in a.model.state_dict().items())
    assert "head" not in lora_layers(a.model)  # all-linear: every nn.Linear but the classifier
    assert sorted(lora_layers(a.model)) == ["blocks.0.attn.proj", "blocks.0.attn.qkv", "blocks.0.mlp.fc1",
                                            "blocks.0.mlp.fc2"]


def test_sa_fedlora_keeps_its_annealed_ranks_and_refuses_another_r(tmp_path):
    plugin = ('plugins = [{{ name = "sa-fedlora-plan", t1_rounds = 1, t2_rounds = 2, r_a = {r_a}, r_b = 2, t_a = 0, '
              't_b = 1 }}]')
    _, result, uploads = run(config(tmp_path, recipe="sa-fedlora", lora='target_modules = ["qkv"]',
                                    pipeline=plugin.format(r_a=3)))
    assert [r["lora_rank"] for r in result.history.rows] == [0, 3]  # stage 1 trains the plain model
    assert "blocks.0.mlp.fc1.weight" in uploads.names[0] and sorted(lora_layers(result.model)) == ["blocks.0.attn.qkv"]
    clash = config(tmp_path, recipe="sa-fedlora", lora="r = 4", pipeline=plugin.format(r_a=3), name="clash")
    assert one_line(lambda: run(clash)) == (
        "model.lora.r = 4 and SAFedLoRAPlan.r_a = 3 disagree; give the rank in one place (SA-FedLoRA injects its "
        "adapters at r_a and anneals them to r_b: set the ranks on sa-fedlora-plan, or r_a = 0 to take model.lora.r)")
    _, took, _ = run(config(tmp_path, recipe="sa-fedlora", lora="r = 4", pipeline=plugin.format(r_a=0), name="zero"))
    assert [r["lora_rank"] for r in took.history.rows] == [0, 4]


def test_targets_in_two_places_or_matching_nothing_are_one_line(tmp_path):
    other = config(tmp_path, pipeline='plugins = [{ name = "sa-fedlora-plan", lora_target_modules = "fc1$" }]')
    assert one_line(lambda: run(other)) == (
        "model.lora.target_modules = ['qkv', 'fc2'] and SAFedLoRAPlan.lora_target_modules = 'fc1$' select different "
        "layers (2 and 1); give the target modules in one place (model.lora)")
    same = config(tmp_path, name="same", pipeline='plugins = [{ name = "sa-fedlora-plan", '
                                                   'lora_target_modules = "(qkv|fc2)$" }]')
    _, result, _ = run(same)  # the same layers, said twice: no conflict
    assert sorted(lora_layers(result.model)) == ["blocks.0.attn.qkv", "blocks.0.mlp.fc2"]
    nothing = config(tmp_path, lora='target_modules = ["query", "value"]', name="nothing")
    assert one_line(lambda: run(nothing)) == (
        "model.lora.target_modules = ['query', 'value'] matches no nn.Linear module of this VisionTransformer; its "
        "linear layers are: blocks.0.attn.qkv, blocks.0.attn.proj, blocks.0.mlp.fc1, blocks.0.mlp.fc2, head")


def test_lora_share_injects_the_model_lora_at_run_start(tmp_path):
    path = config(tmp_path, recipe="fedavg", lora='r = 2\ntarget_modules = ["proj"]', pipeline='split = "lora-share"')
    _, result, uploads = run(path)
    assert sorted(lora_layers(result.model)) == ["blocks.0.attn.proj"] and current_rank(result.model) == 2
    assert uploads.names[0] == set(adapter_keys(result.model)) | {"head.weight", "head.bias"}


def test_model_lora_needs_a_component_that_applies_it_and_valid_settings(tmp_path):
    assert one_line(lambda: plan(load_config(config(tmp_path, recipe="fedfft")))) == (
        "model.lora: no component of this pipeline applies LoRA adapters; use a LoRA recipe (recipe = \"fedlora\" or "
        "\"sa-fedlora\") or split = \"lora-share\"")
    for lora, message in [
        ("rank = 4", "model.lora: unknown setting 'rank'; allowed: r, alpha, target_modules, dropout"),
        ("r = 0", "model.lora: r=0 is out of range; must be >= 1"),
        ("dropout = 1.0", "model.lora: dropout=1.0 is out of range; must be < 1.0"),
        ("target_modules = []", "model.lora: target_modules = []: give module names (a list of strings), a regex "
                                "string or \"all-linear\""),
    ]:
        assert one_line(plan, load_config(None, base=read_toml(config(tmp_path, lora=lora, name="bad")))) == message
    assert not has_lora(materialize(plan(load_config(config(tmp_path, name="ok")))).model)  # injected at run start
