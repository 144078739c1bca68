"""Sample-level DP-SGD through Opacus on whole-model and LoRA shares; ε from the client's own history."""
import pytest
import torch

from fedcore import ConfigError
from fedcore.testing import ContractFixture, run_tiny_pipeline, tiny_bn_model, tiny_model, tiny_vit
from fedcore_dp import DPSGDUpdate, Event, epsilon
from fedcore_dp.dp_sgd import HISTORY

FIXTURE = ContractFixture(model_factory=tiny_model)


def test_whole_model_dp_sgd_reports_the_largest_client_epsilon():
    dp = DPSGDUpdate(noise_multiplier=1.1, max_grad_norm=1.0, batch_size=8, lr=0.1)
    result = run_tiny_pipeline([dp], rounds=2, fixture=FIXTURE)
    states = result.run.client_states
    for state in states.values():  # 32 samples a client, batch 8: rate 1/4, 4 steps a round, 2 rounds
        assert state.stash[HISTORY] == [[0.25, 1.1, 4], [0.25, 1.1, 4]]
    expected = epsilon([Event(q=0.25, z=1.1, count=8)], 1e-5, "opacus-rdp")
    assert result.history.last("dp_sgd_epsilon") == pytest.approx(expected)
    start = tiny_model().state_dict()
    assert any(not torch.equal(start[k], v) for k, v in result.model.state_dict().items())  # it trained


def test_lora_share_trains_only_the_adapters_under_dp_sgd():
    from fedcore_lora import LoRAShare, inject_lora

    def vit_with_lora():
        model = tiny_vit()
        inject_lora(model, rank=2, seed=0)
        return model

    fixture = ContractFixture(model_factory=vit_with_lora)
    before = vit_with_lora().state_dict()
    result = run_tiny_pipeline([LoRAShare(extra=""), DPSGDUpdate(noise_multiplier=1.0, batch_size=8)], rounds=1,
                               fixture=fixture)
    after = result.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert result.history.last("dp_sgd_epsilon") > 0


def test_batchnorm_is_refused_in_one_line():
    with pytest.raises(ConfigError,
                       match=r"^dp-sgd cannot compute per-sample gradients of this model: BatchNorm layer .0. mixes"):
        run_tiny_pipeline([DPSGDUpdate()], rounds=1, fixture=ContractFixture(model_factory=tiny_bn_model))
