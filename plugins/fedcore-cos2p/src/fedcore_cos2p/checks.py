"""How the contract checks run this plugin's components: on a depth-4 micro ViT with the other Co-S2P slots."""
from __future__ import annotations

from typing import Any

from torch import nn


def micro_vit_for_checks() -> nn.Module:
    import torch

    from fedcore.models import micro_vit

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return micro_vit(num_classes=4, embed_dim=16, depth=4, num_heads=4)


def check_plan(own: str, **plan: Any) -> Any:
    """A ``CheckPlan`` whose fixture fills the other two Co-S2P slots (``own`` is the slot being checked)."""
    from fedcore.testing import CheckPlan, ContractFixture
    from fedcore_cos2p.aggregate import Cos2pAggregate
    from fedcore_cos2p.share import Cos2pShare
    from fedcore_cos2p.update import Cos2pUpdate

    slots = {"split": Cos2pShare(mask_rounds=1), "local_update": Cos2pUpdate(epochs=1, batch_size=16),
             "aggregate": Cos2pAggregate()}
    companions = tuple(c for slot, c in slots.items() if slot != own)
    return CheckPlan(fixture=ContractFixture(model_factory=micro_vit_for_checks, companions=companions), **plan)
