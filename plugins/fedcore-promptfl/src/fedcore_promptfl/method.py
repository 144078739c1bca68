"""PromptFL's local update and its pipeline: few-shot partition, prompt share, CoOp update, uniform mean.

Aggregation is Eq. 5.2/6.3, ``P_{t+1} = (1/|C_t|) Σ_k P^k``: the built-in ``FedAvg(weighting="uniform")``
over the only uploaded entry, ``prompt.ctx``.
"""
from __future__ import annotations

from typing import Any

import attrs

from fedcore import Pipeline
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore_clip import PromptEval, PromptShare, PromptUpdate


@attrs.frozen(eq=False, kw_only=True)
class PromptFL(PromptUpdate):
    """PromptFL's client: CoOp SGD of the shared context on the frozen CLIP (thesis Eq. 4.1-4.2, 5.1)."""


def promptfl_pipeline(*, shots: int = 2, mode: str = "disjoint", classes_per_client: int = 2, pool_multiplier: int = 1,
                      fraction: float = 1.0, lr: float = 0.001, epochs: int = 5, batch_size: int = 32,
                      weighting: str = "uniform", evaluate: Any = None, select: Any = None, update: Any = None,
                      extra: tuple[Any, ...] = ()) -> Pipeline:
    """The PromptFL pipeline; ``evaluate``/``select``/``update`` swap in other components (pFedPrompt, CaFPT)."""
    components = [
        FewShotPartition(shots=shots, mode=mode, classes_per_client=classes_per_client,
                         pool_multiplier=pool_multiplier),
        UniformSync(fraction=fraction),
        PromptShare(),
        update if update is not None else PromptFL(lr=lr, epochs=epochs, batch_size=batch_size),
        FedAvg(weighting=weighting),
        evaluate if evaluate is not None else PromptEval(),
    ]
    if select is not None:
        components.append(select)
    return Pipeline(components + list(extra))
