"""What a config can name: open_clip with fedcore's pre-trained tiny CLIP or open_clip weights, clip.shapes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedcore.cli import main
from fedcore_clip.configs import load_clip, prompted_clip_model, shapes
from fedcore_clip.pretrain import load_pretrained
from fedcore_clip.testing import one_thread

CONFIG = """
rounds = 2
num_clients = 3
recipe = "promptfl"
dataset = {{ name = "clip.shapes", n_train_per_class = 4, n_test_per_class = 2, num_classes = 6 }}
model = {{ name = "open_clip", n_ctx = 4, {model} }}
[pipeline]
local_update = {{ epochs = 1, lr = 0.02 }}
[checkpoint]
every = 0
"""


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _run(tmp_path: Path, name: str, model: str, capsys) -> tuple[int, str, list[dict]]:
    path = tmp_path / f"{name}.toml"
    path.write_text(CONFIG.format(model=model))
    out = tmp_path / "runs" / name
    code = main(["run", str(path), "--out", str(out), "--progress", "none"])
    err = capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] if code == 0 else []
    return code, err, rows


@pytest.mark.slow
def test_pretrained_tiny_clip_by_name_through_fedcore_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    code, err, rows = _run(tmp_path, "a", 'pretrained = "fedcore-shapes", pretrain_steps = 3', capsys)
    assert code == 0, err
    assert len(rows) == 2 and all(r["clients"] == [0, 1, 2] for r in rows)
    cached = list((tmp_path / "cache" / "pretrained").glob("fedcore-tiny-clip-shapes-*.safetensors"))
    assert len(cached) == 1  # pre-trained once, into the cache
    resolved = json.loads((tmp_path / "runs" / "a" / "manifest.json").read_text())["model"]
    assert resolved["pretrained"] == "fedcore-shapes" and resolved["classnames"][0] == "red circle"
    code, err, again = _run(tmp_path, "b", 'pretrained = "fedcore-shapes", pretrain_steps = 3', capsys)
    assert code == 0 and [r["test_accuracy"] for r in again] == [r["test_accuracy"] for r in rows]
    # the model's backbone is the cached pre-trained one, not a random one
    backbone, _ = load_pretrained("shapes", steps=3)
    model = prompted_clip_model(classnames=["red circle"], pretrained="fedcore-shapes", pretrain_steps=3, n_ctx=4)
    random = prompted_clip_model(classnames=["red circle"], n_ctx=4)
    first = next(iter(backbone.model.state_dict()))
    assert torch.equal(model.backbone.model.state_dict()[first], backbone.model.state_dict()[first])
    assert not torch.equal(random.backbone.model.state_dict()[first], backbone.model.state_dict()[first])


def test_open_clip_tags_give_one_clear_error(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network: fail fast, as here
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache
    code, err, _ = _run(tmp_path, "c", 'arch = "RN50", pretrained = "nope"', capsys)
    assert code == 2 and err.count("\n") == 1
    assert "pretrained = 'nope' is neither a tag of open_clip architecture 'RN50' (openai, yfcc15m, cc12m)" in err
    with pytest.raises(Exception, match=r"weights RN50/openai of open_clip are neither cached nor reachable") as info:
        load_clip("RN50", "openai")
    assert "\n" not in str(info.value)
    assert f"looked in the Hugging Face hub cache {tmp_path / 'hub'} for timm/resnet50_clip.openai" in str(info.value)
    with pytest.raises(Exception, match=r"the weights file .*missing.safetensors does not exist") as info:
        load_clip("RN50", str(tmp_path / "missing.safetensors"))
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
    with pytest.raises(Exception, match="fedcore's own fedcore-tiny-clip; got arch = 'RN50'"):
        load_clip("RN50", "fedcore-digits")


def test_shapes_data_set_and_classnames_required():
    train, test = shapes(n_train_per_class=2, n_test_per_class=1, num_classes=4)
    assert train.classes == ["red circle", "red square", "red triangle", "red cross"]
    assert len(train) == 8 and len(test) == 4 and int(train.y.max()) == 3
    with pytest.raises(ValueError, match="num_classes = 31; choose 1..30"):
        shapes(num_classes=31)
    with pytest.raises(Exception, match="open_clip needs classnames"):
        prompted_clip_model()


def test_shapes_picks_and_renames_classes():
    """``classes`` keeps those classes in that order (labels 0..k-1), ``names`` renames them; bad input is one line."""
    full, _ = shapes(n_train_per_class=2, n_test_per_class=1)
    train, test = shapes(n_train_per_class=2, n_test_per_class=1, classes=["blue ring", "red circle"],
                         names=["alpha", "bravo"])
    assert train.classes == test.classes == ["alpha", "bravo"] and sorted(set(train.y.tolist())) == [0, 1]
    blue_ring = full.classes.index("blue ring")
    assert torch.equal(train.x[train.y == 0], full.x[full.y == blue_ring])
    assert torch.equal(train.x[train.y == 1], full.x[full.y == 0])
    with pytest.raises(ValueError, match="classes = \\['pink circle'\\]; give distinct names among: red circle"):
        shapes(classes=["pink circle"])
    with pytest.raises(ValueError, match="names = \\['alpha'\\]; give 2 distinct names"):
        shapes(classes=["blue ring", "red circle"], names=["alpha"])


def test_the_learning_checks_class_names_never_occur_in_pretraining_captions():
    """The prompt recipes' learning check (configs.LEARNING_SETUP) claims its class names are words the tiny CLIP never
    read: none of their tokens is a token of any pre-training caption, and its classes are real shape classes."""
    from fedcore_clip.backbone import TINY, get_tokenizer
    from fedcore_clip.captioned import captions, shape_classnames
    from fedcore_clip.configs import LEARNING_SETUP

    tok = get_tokenizer(TINY)
    seen = {t for per_class in captions("shapes", shape_classnames())[0] for c in per_class for t in tok.encode(c)}
    names = LEARNING_SETUP["dataset"]["names"]
    assert names and not any(set(tok.encode(n)) & seen for n in names)
    assert set(LEARNING_SETUP["dataset"]["classes"]) <= set(shape_classnames())


def _built(seed: int, **model):
    from fedcore.experiment import load_config, materialize, plan

    cfg = load_config(None, base={
        "seed": seed, "rounds": 1, "num_clients": 3, "recipe": "promptfl",
        "dataset": {"name": "clip.shapes", "n_train_per_class": 2, "n_test_per_class": 1, "num_classes": 3},
        "model": {"name": "open_clip", "n_ctx": 4, **model}})
    planned = plan(cfg)
    m = materialize(planned)
    assert m.resolved["model"]["head_seed"] == planned.resolved["model"]["head_seed"]
    return m, planned.resolved["model"]["head_seed"]


def test_a_config_run_draws_the_prompt_from_its_seed_unless_head_seed_is_given():
    """Seed s of a sweep is a replicate: its prompt starts as ``prompted_clip(backbone, seed=s)``; the random
    backbone's weights follow the model's own ``seed``."""
    from fedcore_clip import load_backbone, prompted_clip

    (one, s1), (zero, s0), (given, sg) = _built(1), _built(0), _built(1, head_seed=0)
    assert (s1, s0, sg) == (1, 0, 0)
    expected = prompted_clip(load_backbone(seed=0), one.model.prompt.classnames, n_ctx=4, seed=1)
    assert torch.equal(one.model.prompt.ctx, expected.prompt.ctx)
    assert not torch.equal(one.model.prompt.ctx, zero.model.prompt.ctx)
    assert torch.equal(given.model.prompt.ctx, zero.model.prompt.ctx)
    first = next(iter(zero.model.backbone.model.state_dict()))
    assert torch.equal(one.model.backbone.model.state_dict()[first], zero.model.backbone.model.state_dict()[first])
    direct = prompted_clip_model(classnames=["a", "b"], n_ctx=4, seed=2, head_seed=7)  # the factory itself
    assert torch.equal(direct.prompt.ctx, prompted_clip(load_backbone(seed=2), ["a", "b"], n_ctx=4, seed=7).prompt.ctx)


def test_a_zero_learning_rate_leaves_the_prompt_at_its_initialisation(tmp_path, capsys):
    """The untrained-prompt control of fedcore-promptfl's repro/promptfl_sweep.toml: ``local_update.lr = 0`` runs the
    clients but the prompt does not move, so the run scores the initial prompt; any positive rate moves it."""
    from fedcore.experiment import load_config, materialize, plan

    def final(lr: float):
        cfg = load_config(None, base={
            "seed": 2, "rounds": 2, "num_clients": 3, "recipe": "promptfl",
            "dataset": {"name": "clip.shapes", "n_train_per_class": 4, "n_test_per_class": 2, "num_classes": 6},
            "model": {"name": "open_clip", "n_ctx": 4}, "pipeline": {"local_update": {"lr": lr, "epochs": 1}}})
        m = materialize(plan(cfg))
        start = m.model.prompt.ctx.detach().clone()
        res = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, **m.run_kwargs)
        return start, m.model.prompt.ctx.detach(), res.history, m

    start, end, history, m = final(0.0)
    assert torch.equal(start, end) and len(history.rows) == 2
    with torch.no_grad():
        untrained = float((m.model(m.test.x).argmax(-1) == m.test.y).float().mean())
    assert history.column("test_accuracy") == [untrained, untrained]
    start, end, _, _ = final(0.02)
    assert not torch.equal(start, end)
