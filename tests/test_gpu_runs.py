"""On a CUDA GPU (issue 23): the substrates, the vectorised cohorts, the example and a resumed run, each small.

Every test here is marked ``gpu`` and skips without CUDA; ``benchmarks/gpu_evidence.py`` runs them (``pytest -m
gpu``) on a lent GPU beside its measurements. ``FEDCORE_GPU_TEST_DEVICE=cpu`` rehearses them on a machine without
one (the same code paths on the CPU, fp16 refused for the device), so they are known to run before device time
is spent on them.

Agreement checks turn TF32 off: with it, cuDNN and cuBLAS round inputs to 10-bit mantissas, and the stacked
(grouped) kernels of the vectorised cohort round differently from the lone client's.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.experiment import load_config, plan, prepare, run_experiment
from fedcore.experiment.build import materialize
from fedcore.experiment.matrix import cell_config, row_problem
from fedcore.runtime.placement import fp16_refusal

ROOT = Path(__file__).resolve().parent.parent
DEVICE = os.environ.get("FEDCORE_GPU_TEST_DEVICE", "cuda")
"""Where these tests run: ``cuda`` (default) or ``cpu`` to rehearse them without a GPU."""

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (FEDCORE_GPU_TEST_DEVICE=cpu rehearses these on the CPU)")]

RECIPES = ("splitfed-v1", "sa-fedlora", "promptfl", "co-s2p", "fedvkd", "tree-learning")
"""One recipe per substrate: split learning, LoRA, CLIP prompts, pruning, distillation, Tree Learning."""


@pytest.fixture
def no_tf32():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _off_device(module: nn.Module) -> list[str]:
    """The model's tensors that are not on the tests' device (none, when the run placed it)."""
    return [k for k, t in module.state_dict().items() if t.device.type != torch.device(DEVICE).type]


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_substrate_trains_on_the_gpu_in_fp32_bf16_and_fp16_or_refuses_fp16_in_one_line(recipe):
    for precision in ("fp32", "bf16", "fp16"):
        cfg = cell_config(recipe, "uniform", rounds=1)
        cfg.update(device=DEVICE, precision=precision, name=f"gpu-{recipe}-{precision}")
        try:
            checked = plan(load_config(None, base=cfg))
        except ConfigError as exc:
            text = str(exc)
            assert precision == "fp16" and "\n" not in text, (precision, text)
            assert text == fp16_refusal(fedcore.recipe(recipe).components) or not DEVICE.startswith("cuda"), text
            continue
        m = materialize(checked)
        result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
        rows = [dict(r) for r in result.history.rows]
        assert row_problem(rows, 1) is None, (precision, row_problem(rows, 1))
        assert not _off_device(result.model), (precision, _off_device(result.model)[:5])


def _digits_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    """Each client's uploaded tensors per round, as float64 on the CPU."""

    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.seen[(ctx.round, client.id)] = torch.cat([update.tensors[k].detach().double().cpu().flatten()
                                                       for k in sorted(update.tensors)])


def _cohort_run(cohort: dict, **run) -> tuple:
    uploads = Uploads()
    pipe = fedcore.Pipeline.from_config({
        "partition": "iid", "schedule": {"name": "uniform", "fraction": 1.0},
        "local_update": {"name": "sgd", "lr": 0.05, "batch_size": 10, "epochs": 1}, "cohort": cohort,
        "plugins": [uploads]})
    return pipe.run(device=DEVICE, seed=0, **run), uploads.seen


def _worst_relative_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).norm() / a[k].norm()) for k in a)


def test_the_vectorised_cohort_on_the_gpu_trains_every_client_stacked_and_agrees_with_per_job(no_tf32):
    from fedcore.data import load_digits

    train, test = load_digits()
    run = dict(train=train.subset(range(300)), test=test, num_clients=6, rounds=2)
    alone, alone_up = _cohort_run({"name": "per-job"}, model=_digits_cnn(), **run)
    stacked, stacked_up = _cohort_run({"name": "vectorised", "on_cpu": "vectorise"}, model=_digits_cnn(), **run)
    assert stacked.history.column("cohort_vectorised") == [6.0, 6.0]  # on the GPU: always, every client
    assert not _off_device(stacked.model)
    assert _worst_relative_gap(alone_up, stacked_up) < 1e-4
    assert abs(alone.history.last("test_loss") - stacked.history.last("test_loss")) < 1e-4


def test_the_frozen_backbone_cohorts_on_the_gpu_agree_with_per_job(no_tf32):
    from fedcore.data import load_digits
    from fedcore.models import micro_vit
    from fedcore_clip import prompted_clip
    from fedcore_clip.testing import shapes_data, tiny_backbone

    train, test = shapes_data(4, 1, 6, stream="gpu")
    gaps = {}
    for label in ("per-job", "vectorised-prompt"):
        pipe = fedcore.recipe("promptfl", cohort=label, partition={"shots": 2, "mode": "random_classes"},
                              local_update={"lr": 0.05, "epochs": 1, "batch_size": 2})
        model = prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=0)
        uploads = Uploads()
        result = fedcore.Pipeline([*pipe.components, uploads]).run(model=model, train=train, test=test, num_clients=4,
                                                                   rounds=1, seed=0, device=DEVICE)
        gaps[label] = (result, uploads.seen)
    assert _worst_relative_gap(gaps["per-job"][1], gaps["vectorised-prompt"][1]) < 1e-4

    digits, _ = load_digits()
    lora = {}
    for label in ("per-job", {"name": "vectorised", "on_cpu": "vectorise"}):
        torch.manual_seed(0)
        model = micro_vit(num_classes=10, embed_dim=32, depth=2, num_heads=2)
        pipe = fedcore.recipe("fedlora", cohort=label, partition={"name": "iid"},
                              local_update={"e2_local_epochs": 1, "batch_size": 10})
        uploads = Uploads()
        result = fedcore.Pipeline([*pipe.components, uploads]).run(
            model=model, train=digits.subset(range(80)), test=None, num_clients=4, rounds=1, seed=0, device=DEVICE)
        lora["per-job" if label == "per-job" else "vectorised"] = (result, uploads.seen)
    assert lora["vectorised"][0].history.column("cohort_vectorised") == [4.0]
    assert _worst_relative_gap(lora["per-job"][1], lora["vectorised"][1]) < 1e-4


def test_the_example_runs_on_the_gpu_and_ends_near_the_cpu_run(tmp_path):
    config = ROOT / "examples" / "fedavg_dirichlet.toml"
    finals = {}
    for device in dict.fromkeys([DEVICE, "cpu"]):
        outcome = run_experiment(prepare(config, ["rounds=3", f'device="{device}"']), out=tmp_path / device,
                                 progress="none")
        assert outcome.state == "finished" and len(outcome.rows) == 3
        finals[device] = outcome.rows[-1]
    gpu, cpu = finals[DEVICE], finals["cpu"]
    assert math.isfinite(gpu["test_loss"])
    assert abs(gpu["test_accuracy"] - cpu["test_accuracy"]) <= 3 / 450 + 1e-9  # 450 test digits: 3 may flip
    assert abs(gpu["test_loss"] - cpu["test_loss"]) < 1e-2


class Stop(Exception):
    pass


def _stop_at(index):
    def on_round(row):
        if row["round"] == index:
            raise Stop
    return on_round


def test_a_bf16_run_checkpointed_on_the_gpu_resumes_on_the_cpu_and_back_within_the_tolerance(tmp_path):
    config = ROOT / "examples" / "fedavg_dirichlet.toml"
    sets = ["rounds=4", 'precision="bf16"', "checkpoint.every=1"]
    full = run_experiment(prepare(config, [*sets, f'device="{DEVICE}"']), out=tmp_path / "full", progress="none").rows
    path = tmp_path / "legs"
    with pytest.raises(Stop):
        run_experiment(prepare(config, [*sets, f'device="{DEVICE}"']), out=path, progress="none",
                       on_round=_stop_at(0))
    with pytest.raises(Stop):
        run_experiment(prepare(config, [*sets, 'device="cpu"']), resume=path, progress="none", on_round=_stop_at(1))
    resumed = run_experiment(prepare(config, [*sets, f'device="{DEVICE}"']), resume=path, progress="none").rows
    assert [r["round"] for r in resumed] == [0, 1, 2, 3]
    for a, b in zip(full, resumed):
        assert abs(a["test_loss"] - b["test_loss"]) <= 2e-2  # gpu_evidence.py's bf16 pass line
        assert abs(a["test_accuracy"] - b["test_accuracy"]) <= 9 / 450 + 1e-9
        if not DEVICE.startswith("cuda"):  # one device: the resumed history is the uninterrupted one
            assert a["test_loss"] == b["test_loss"] and a["test_accuracy"] == b["test_accuracy"]
