"""The self-pre-trained micro backbones: deterministic by seed, cached, re-headed for a disjoint target task."""
from __future__ import annotations

import pytest
import torch

from fedcore.models.pretrain import cache_root, pretrain, pretrained_for_target, retarget


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path))
    return tmp_path


def test_pretrain_is_deterministic_learns_and_is_cached(cache):
    a, info = pretrain("micro-cnn", epochs=4, lr=1e-2, seed=1, model_kwargs={"width": 8})
    b, _ = pretrain("micro-cnn", epochs=4, lr=1e-2, seed=1, model_kwargs={"width": 8}, cache=False)
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), f"{k} differs between two pre-trainings with one seed"
    assert info["source_accuracy"] > 0.5  # five source classes: chance is 0.2
    assert (cache_root() / f"{info['path'].split('/')[-1]}").exists() and str(cache) in info["path"]
    c, again = pretrain("micro-cnn", epochs=4, lr=1e-2, seed=1, model_kwargs={"width": 8})  # from the cache
    assert again == info and all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_pretrained_for_target_gets_a_fresh_head_and_keeps_the_body(cache):
    source, _ = pretrain("micro-vit", epochs=1, model_kwargs={"depth": 1})
    target, info = pretrained_for_target("micro-vit", epochs=1, model_kwargs={"depth": 1}, target_classes=(5, 6, 7))
    assert target.head.out_features == 3 and info["source_classes"] == [0, 1, 2, 3, 4]
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("head")}
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in body.items())


def test_overlapping_source_and_target_and_unknown_models_are_refused(cache):
    with pytest.raises(ValueError, match="overlap on \\[4\\]"):
        pretrained_for_target("tiny-mlp", target_classes=(4, 5), epochs=1)
    with pytest.raises(ValueError, match="choose one of: micro-vit, micro-cnn, tiny-mlp"):
        pretrain("resnet9000", epochs=1)
    with pytest.raises(TypeError, match="replace the head"):
        retarget(torch.nn.Identity(), 3)


RUN_CONFIG = """
rounds = 2
num_clients = 3
recipe = "fedavg"
dataset = {{ name = "digits", {classes} }}
model = {{ name = "{model}", epochs = 1 }}
[checkpoint]
every = 0
"""


def _run(tmp_path, name, capsys, *, model="micro-vit-pretrained", classes="classes = [5, 6, 7, 8, 9]"):
    import json

    from fedcore.cli import main

    path = tmp_path / f"{name}.toml"
    path.write_text(RUN_CONFIG.format(model=model, classes=classes))
    out = tmp_path / "runs" / name
    code = main(["run", str(path), "--out", str(out), "--progress", "none"])
    err = capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] if code == 0 else []
    return code, err, rows


@pytest.mark.slow
def test_micro_vit_pretrained_by_name_through_fedcore_run(cache, capsys):
    """One core name, ``micro-vit-pretrained``; the safedlora name is an alias giving the same run."""
    import fedcore

    code, err, rows = _run(cache, "core", capsys)
    assert code == 0, err
    assert len(rows) == 2 and rows[-1]["test_accuracy"] > 0.2  # 5 target classes
    assert len(list((cache / "pretrained").glob("micro-vit-*.safetensors"))) == 1  # pre-trained once, cached
    entry = fedcore.plugins.lookup("micro-vit-pretrained", kind="model")
    assert entry.distribution == "fedcore" and entry.obj is fedcore.models.micro_vit_pretrained
    model = fedcore.models.micro_vit_pretrained(epochs=1)
    source, _ = pretrain("micro-vit", epochs=1)
    assert model.head.out_features == 5
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("head")}
    assert body and all(torch.equal(v, model.state_dict()[k]) for k, v in body.items())
    if "safedlora.micro-vit-pretrained" in fedcore.plugins.registry().names("model"):
        code, err, alias = _run(cache, "alias", capsys, model="safedlora.micro-vit-pretrained")
        assert code == 0, err
        assert [r["test_accuracy"] for r in alias] == [r["test_accuracy"] for r in rows]


def test_micro_vit_pretrained_refuses_a_data_set_with_other_classes(cache, capsys):
    code, err, _ = _run(cache, "bad", capsys, classes="seed = 0")
    assert code == 2 and err.count("\n") == 1
    assert "num_classes = 10 but target_classes [5, 6, 7, 8, 9] has 5" in err


def test_a_build_with_one_thread_and_with_two_gives_bit_identical_weights(tmp_path, monkeypatch):
    """The same build run by a caller on one intra-op thread and by one on two, each into its own cache (so both
    really train), gives one cache key and the same bytes, and each caller gets its thread count back (before the
    fix these weights differed). Both builds run in this process: the thread count is the caller's setting, not
    the process's, so no child process is needed to vary it."""
    from pathlib import Path

    from fedcore.models.pretrain import pretrain

    files = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / f"t{threads}"))
            torch.set_num_threads(threads)
            _, info = pretrain("tiny-mlp", epochs=2, seed=3)
            assert torch.get_num_threads() == threads, "the caller's thread count was not restored"
            files.append(Path(info["path"]))
    finally:
        torch.set_num_threads(before)
    assert all(str(tmp_path) in str(f) for f in files) and files[0] != files[1]  # two builds, not a cache hit
    assert files[0].name == files[1].name  # one cache key
    assert files[0].read_bytes() == files[1].read_bytes()


def test_a_cache_from_before_deterministic_builds_is_never_read(cache):
    """Format 1 files were built with whatever thread count the process had: their key no longer matches."""
    import hashlib
    import json

    from safetensors.torch import save_file

    old = {"model": "tiny-mlp", "source_classes": [0, 1, 2, 3, 4], "epochs": 1, "lr": 2e-3, "batch_size": 64,
           "seed": 0, "model_kwargs": {}, "format": 1}
    key = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    stale = cache_root() / f"tiny-mlp-{key}.safetensors"
    stale.parent.mkdir(parents=True)
    net, _ = pretrain("tiny-mlp", epochs=1, cache=False)
    save_file({k: torch.zeros_like(v) for k, v in net.state_dict().items()}, str(stale))
    stale.with_suffix(".json").write_text(json.dumps({**old, "source_accuracy": 0.0}))
    again, info = pretrain("tiny-mlp", epochs=1)
    assert info["path"] != str(stale) and info["format"] == 2 and info["build_threads"] == 1
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), again.state_dict().values()))


def test_a_config_run_seeds_the_fresh_head_from_its_seed_unless_head_seed_is_given(cache):
    """Seed s of a sweep is a replicate: its head is drawn with s, as ``pretrained_for_target(head_seed=s)``."""
    from fedcore.experiment import load_config, materialize, plan

    def built(seed: int, **model):
        cfg = load_config(None, base={"seed": seed, "rounds": 1, "num_clients": 3, "recipe": "fedavg",
                                      "dataset": {"name": "digits", "classes": [5, 6, 7, 8, 9]},
                                      "model": {"name": "micro-vit-pretrained", "epochs": 1, **model}})
        planned = plan(cfg)  # the resolved config (a run's config.toml, a sweep cell's fingerprint) holds it
        head_seed = planned.resolved["model"]["head_seed"]
        m = materialize(planned)
        assert m.resolved["model"]["head_seed"] == head_seed
        return m.model, head_seed

    (one, s1), (zero, s0) = built(1), built(0)
    (given, sg) = built(1, head_seed=0)
    assert (s1, s0, sg) == (1, 0, 0)
    expected, _ = pretrained_for_target("micro-vit", epochs=1, head_seed=1)
    assert torch.equal(one.head.weight, expected.head.weight)
    assert not torch.equal(one.head.weight, zero.head.weight)
    assert torch.equal(given.head.weight, zero.head.weight)
