"""PromptFL: contract checks, the method by name, the Table 4.1 cost model, real parameter counts, baselines."""
from __future__ import annotations

import pytest
import torch

import fedcore
from fedcore.testing import parametrize_with_checks
from fedcore_clip import prompted_clip
from fedcore_clip.testing import PROMPT_FIXTURE, one_thread, shapes_data
from fedcore_clip.testing import tiny_backbone as backbone
from fedcore_promptfl import (
    PromptFL,
    clip_image_classifier,
    finetune_pipeline,
    prompt_ratios,
    promptfl_pipeline,
    system_cost,
)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def data(classes=6, n_train=6, n_test=3):
    return shapes_data(n_train, n_test, classes, stream="p")


@parametrize_with_checks([PromptFL(epochs=1, lr=0.01),
                          PromptFL(epochs=1, lr=0.01, cache_features=False, augment_shift=1)], fixture=PROMPT_FIXTURE)
def test_contract(component, check):
    check(component)


def test_runs_by_name_from_a_config():
    cfg = {"partition": {"name": "fewshot", "shots": 2, "mode": "disjoint"}, "split": "prompt-share",
           "local_update": {"name": "promptfl", "lr": 0.05, "epochs": 1}, "aggregate": {"name": "fedavg",
                                                                                       "weighting": "uniform"},
           "evaluate": "prompt-eval"}
    pipe = fedcore.Pipeline.from_config(cfg)
    assert pipe.describe()["slots"]["local_update"] == "promptfl"
    train, test = data()
    model = fedcore.plugins.registry().get("open_clip", kind="model").obj(classnames=train.classes, n_ctx=4)
    res = pipe.run(model=model, train=train, test=test, num_clients=3, rounds=1, seed=0)
    assert res.ledger.total(direction="up") == 3 * 4 * 64 * 4


def test_table_4_1_golden_values():
    prompt = system_cost(params=150e6, prompt_learning=True)
    fl = system_cost(params=100e6)
    assert prompt.comm_seconds == pytest.approx(88.9, abs=0.05)
    assert fl.comm_seconds == pytest.approx(32593, abs=1)
    assert fl.comm_seconds / 3600 == pytest.approx(9.05, abs=0.01)
    assert fl.train_flops == pytest.approx(3.7632e12)
    assert prompt.inference_flops == pytest.approx(58.8e9)
    assert fl.inference_flops == pytest.approx(39.2e9)
    assert prompt.storage_bytes == 600e6 and fl.storage_bytes == 400e6
    assert fl.download_bytes == 40e9 and fl.upload_bytes == 40e9


def test_real_rn50_counts_and_the_upload_ratio():
    r = prompt_ratios("RN50")
    assert r["prompt_params"] == 8192 and r["token_width"] == 512
    assert r["total_params"] == pytest.approx(102.01e6, rel=0.005)
    assert r["image_params"] == pytest.approx(38.32e6, rel=0.005)
    assert r["upload_ratio_image_tower"] == pytest.approx(38.32e6 / 8192, rel=0.005)  # ~4.7e3, not 110x


def test_finetune_and_scratch_baselines_send_the_whole_tower():
    train, test = data()
    bb = backbone()
    ft = clip_image_classifier(bb, len(train.classes), init="pretrained")
    scratch = clip_image_classifier(bb, len(train.classes), init="scratch")
    assert torch.equal(ft.visual.conv1.weight, bb.model.visual.conv1.weight)
    assert not torch.equal(scratch.visual.conv1.weight, bb.model.visual.conv1.weight)
    res = finetune_pipeline(shots=2, epochs=1).run(model=ft, train=train, test=test, num_clients=3, rounds=1, seed=0)
    tower_bytes = sum(v.numel() * v.element_size() for v in ft.state_dict().values())
    assert res.ledger.total(direction="down") == 3 * tower_bytes
    prompt = promptfl_pipeline(shots=2, epochs=1, lr=0.05).run(
        model=prompted_clip(bb, train.classes, n_ctx=16), train=train, test=test, num_clients=3, rounds=1, seed=0)
    assert res.ledger.total(direction="up") / prompt.ledger.total(direction="up") == pytest.approx(
        sum(p.numel() for p in ft.parameters()) / (16 * 64), rel=0.01)


def test_the_baseline_classifier_builds_on_the_meta_device():
    """``clip-image-classifier`` with a ViT-B-16 tower, built without weights or memory (the planner's counts): the
    image tower (86.19M) plus a 10-class head over its 512-d embedding."""
    factory = fedcore.plugins.lookup("clip-image-classifier", kind="model").obj
    with torch.device("meta"):
        model = factory(num_classes=10, arch="ViT-B-16", init="scratch")
    assert sum(p.numel() for p in model.parameters()) == 86_192_640 + 512 * 10 + 10
    assert {p.device.type for p in model.parameters()} == {"meta"}
