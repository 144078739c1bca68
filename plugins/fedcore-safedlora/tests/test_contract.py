"""The fedcore contract checks for every component of the plugin, on a small timm ViT."""
import torch

from fedcore.models import micro_vit
from fedcore.testing import ContractFixture, parametrize_with_checks
from fedcore_lora import StalenessMean, inject_lora
from fedcore_safedlora import (
    BitFitShare,
    EpochsUpdate,
    FromScratch,
    FullShare,
    LocalShare,
    PersonalUpdate,
    SAFedLoRAPlan,
    StageShare,
    StageUpdate,
)

torch.set_num_threads(1)


def vit():
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=1, num_heads=2)


def vit_with_lora():
    model = vit()
    inject_lora(model, rank=2, seed=0)
    return model


VIT = ContractFixture(model_factory=vit)
FAST = dict(t2_rounds=4, r_a=2, r_b=2, t_a=1, t_b=2)


@parametrize_with_checks(
    [SAFedLoRAPlan(**FAST), StageShare(), StageUpdate(e1_local_epochs=1, e2_local_epochs=1), FullShare(),
     FromScratch(), BitFitShare(), EpochsUpdate(epochs=1), LocalShare(), PersonalUpdate(epochs=1)],
    fixture=VIT)
def test_contract(component, check):
    check(component)


# the LoRA stage (round 0 with t1_rounds=0) on a global model that already carries adapters
@parametrize_with_checks([SAFedLoRAPlan(**dict(FAST, t1_rounds=0)),
                          SAFedLoRAPlan(**dict(FAST, t1_rounds=0, truncation="slice")), StageShare(),
                          StageUpdate(e1_local_epochs=1, e2_local_epochs=1), StalenessMean()],
                         fixture=ContractFixture(model_factory=vit_with_lora))
def test_contract_lora_stage(component, check):
    check(component)
