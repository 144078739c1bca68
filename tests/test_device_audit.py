"""DefaultDeviceAudit: the CPU stand-in for the device checks a GPU makes, and the bugs the first GPU run found.

The first run on a lent GPU (benchmarks/results/gpu/2026-11-27-h200) broke 11 recipes with "Expected all tensors to
be on the same device": tensors made without ``device=`` (noise, moments, masks, a decoded secure sum, token ids)
meeting the model's CUDA tensors. Each case below fails on the code before its fix.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore.experiment.build import materialize, plan
from fedcore.experiment.config import load_config
from fedcore.experiment.matrix import cell_config
from fedcore.testing import DefaultDeviceAudit, DeviceMixError


def test_a_tensor_made_without_a_device_meeting_a_given_one_is_a_mix() -> None:
    given = torch.ones(3)
    with DefaultDeviceAudit(), pytest.raises(DeviceMixError, match="made without device="):
        _ = given + torch.zeros(3)
    with DefaultDeviceAudit(), pytest.raises(DeviceMixError):
        _ = torch.stack([given, torch.zeros(3) * 2])  # computed from an unplaced tensor: still unplaced


def test_placed_tensors_scalars_and_copies_are_not_a_mix() -> None:
    given = torch.ones(3)
    with DefaultDeviceAudit():
        total = given + torch.zeros(3, device=given.device)
        total = total + torch.zeros(3).to(given.device) + torch.zeros_like(given)
        total = total * torch.tensor(2.0)  # a zero-dim CPU tensor: CUDA accepts it
        total[0] = torch.tensor([5.0])[0]
        total.copy_(torch.ones(3))
    assert torch.equal(total, torch.ones(3))


def test_from_numpy_is_watched_inside_the_block_and_restored_after() -> None:
    real, given = torch.from_numpy, torch.ones(2)
    with DefaultDeviceAudit(), pytest.raises(DeviceMixError):
        _ = given + torch.from_numpy(np.zeros(2, dtype=np.float32))
    assert torch.from_numpy is real


@pytest.mark.parametrize("recipe", ["dp-fedavg", "qffl", "secagg-fedavg", "centred-clipping"])
def test_the_recipes_the_first_gpu_run_broke_outside_the_aggregator_train_a_round_under_the_audit(recipe: str
                                                                                                    ) -> None:
    """DP-FedAvg's noise (a cohort wrapper), q-FFL's numerator and the secure sum's decoded change: paths the
    aggregate contract check does not reach (the others it covers: check_aggregate_stays_on_the_models_device);
    centred clipping's start, which that check only warns about (fedcore-robust stands for a third party)."""
    config = cell_config(recipe, "uniform", rounds=1)
    config.update(name=f"audit-{recipe}")
    try:
        built = materialize(plan(load_config(None, base=config)))
    except ConfigError as exc:  # pragma: no cover - every one of these is a working recipe
        pytest.fail(f"{recipe} was refused: {exc}")
    with DefaultDeviceAudit():
        result = built.plan.pipeline.run(model=built.model, train=built.train, test=built.test,
                                         executor=built.executor, **built.run_kwargs)
    assert len(result.history.rows) == 1, f"{recipe}: the round did not end"


def test_a_prompt_learner_builds_from_a_backbone_on_another_device() -> None:
    """PromptFL's learner embedded its class-name token ids (made on the CPU) with the backbone's token table: a
    backbone already on the GPU (a cached one a run had moved) broke the frozen-cohort benchmark."""
    pytest.importorskip("open_clip")
    from fedcore_clip import prompted_clip
    from fedcore_clip.testing import tiny_backbone

    backbone = tiny_backbone()
    with DefaultDeviceAudit():
        model = prompted_clip(backbone, ["circle", "square", "triangle"], n_ctx=4, seed=0)
    assert model.prompt.tokenized.shape[0] == 3
