"""How the contract checks (``fedcore.testing``) run this substrate's components: on a ViT they can slice."""
from __future__ import annotations

from typing import Any


def vit_check_plan(preset: Any, *companions: Any) -> Any:
    """A ``CheckPlan``: ``preset`` on fedcore's two-block tiny timm ViT (2 heads, so widths 1 and 0.5 fit),
    tiny data, and the ``companions`` the pipeline needs (a submodel share needs ``masked-delta``)."""
    from fedcore.testing import CheckPlan, ContractFixture, tiny_data, tiny_vit

    return CheckPlan(presets=(preset,), fixture=ContractFixture(
        model_factory=tiny_vit, companions=companions, data_factory=lambda: tiny_data(n=48, n_test=24)))
