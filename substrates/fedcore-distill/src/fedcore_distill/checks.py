"""The contract checks' plan for the distillation components: a micro FedVKD model on micro SynthPatterns, the
other distillation slots as companions (a share needs the edge update and the server, and so on)."""
from __future__ import annotations

from typing import Any


def micro_system() -> Any:
    from fedcore_distill.zoo import fedvkd_model

    return fedvkd_model(width=4, embed_dim=16, depth=1, num_heads=2, image_size=8, num_classes=4)


def micro_data() -> Any:
    from fedcore_distill.synth import synth_patterns_dataset

    return synth_patterns_dataset(n=48, n_test=16, num_classes=4, size=8, seed=0)


def distill_check_plan(checked: type, expected_failures: dict[str, str] | None = None) -> Any:
    """The plan for ``checked``: the micro fixture with the other three distillation slots as companions."""
    from fedcore.testing import CheckPlan
    from fedcore_distill.edge import EdgeKDTrain
    from fedcore_distill.evaluate import KDEval
    from fedcore_distill.server import KDServer
    from fedcore_distill.share import EdgeShare

    companions = [c for c in (EdgeShare(), EdgeKDTrain(batch_size=16, augment=False), KDServer(epochs=1, batch_size=16),
                              KDEval()) if not isinstance(c, checked)]
    return CheckPlan(fixture=_fixture(companions), expected_failures=expected_failures or {})


def _fixture(companions: list[Any]) -> Any:
    from fedcore.testing import ContractFixture

    return ContractFixture(model_factory=micro_system, data_factory=micro_data, companions=companions)


__all__ = ["distill_check_plan", "micro_data", "micro_system"]
