"""Tiny, seeded, CPU-only things to test components with: data, a model, contexts, a whole run."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from pluggy import HookImpl, Result
import torch
from torch import nn

from fedcore.contexts import RoundContext
from fedcore.data.arrays import ArrayDataset
from fedcore.data.synthetic import synthetic_classification
from fedcore.engine.history import RunResult
from fedcore.engine.loop import Engine
from fedcore.models.micro import tiny_mlp
from fedcore.pipeline import Pipeline
from fedcore.runtime.job_rng import seed_torch


def tiny_data(*, n: int = 96, n_test: int = 48, num_classes: int = 4, seed: int = 0
              ) -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of seeded Gaussian blobs shaped 1x8x8."""
    full = synthetic_classification(n=n + n_test, num_classes=num_classes, seed=seed)
    return full.subset(range(n)), full.subset(range(n, n + n_test))


def tiny_model(*, num_classes: int = 4, seed: int = 0) -> nn.Module:
    """A seeded MLP on 1x8x8 inputs."""
    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        return tiny_mlp(num_classes=num_classes)


def tiny_bn_model(*, num_classes: int = 4, seed: int = 0) -> nn.Module:
    """A seeded MLP on 1x8x8 inputs behind a BatchNorm2d: the contract fixture's model.

    The BatchNorm's float buffers (``0.running_mean``, ``0.running_var``) reach every aggregator, so the
    checks see what a real CNN uploads; it normalises the input channel, so a batch of one is fine.
    """
    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        return nn.Sequential(nn.BatchNorm2d(1), *tiny_mlp(num_classes=num_classes).children())


def tiny_vit(*, num_classes: int = 4, seed: int = 0) -> nn.Module:
    """A seeded two-block timm ViT of width 16 on 1x8x8 inputs (for components that need named stages)."""
    from fedcore.models.micro import micro_vit

    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        return micro_vit(num_classes=num_classes, depth=2, embed_dim=16, num_heads=2)


@attrs.frozen(kw_only=True)
class ContractFixture:
    """What the contract checks run a component on.

    ``companions`` fill the other slots a component needs (a local update that needs a split
    endpoint, say); ``model_factory`` and ``data_factory`` build the model and ``(train, test)``. The
    contract checks' own default is :data:`CHECK_FIXTURE` (BatchNorm buffers included).
    """

    model_factory: Callable[[], nn.Module] = tiny_model
    data_factory: Callable[[], tuple[Any, Any]] = tiny_data
    companions: Sequence[Any] = ()
    num_clients: int = 3
    seed: int = 0


CHECK_FIXTURE = ContractFixture(model_factory=tiny_bn_model)
"""What the contract checks run on when neither the caller nor the component's CheckPlan names a fixture:
the tiny MLP behind a BatchNorm, so every aggregator sees float buffers as a real CNN uploads them.
(:func:`run_tiny_pipeline` keeps :func:`tiny_model`, so recorded histories of tiny runs stay valid.)"""


def build_engine(components: Sequence[Any], fixture: ContractFixture | None = None, **overrides: Any) -> Engine:
    """An :class:`Engine` set up (partitioned, scheduler made) on the fixture, ready for single hook calls."""
    fx = fixture or ContractFixture()
    train, test = fx.data_factory()
    kwargs = dict(model=fx.model_factory(), train=train, test=test, num_clients=fx.num_clients, rounds=2, seed=fx.seed)
    kwargs.update(overrides)
    engine = Engine(Pipeline(list(components) + list(fx.companions)), **kwargs)
    engine.setup()
    return engine


def round_context(engine: Engine, round: int = 0) -> RoundContext:
    return RoundContext(round=round, seed=engine.run_ctx.seed, run=engine.run_ctx)


def run_tiny_pipeline(plugins: Sequence[Any], *, rounds: int = 2, fixture: ContractFixture | None = None,
                      **kwargs: Any) -> RunResult:
    """An end-to-end run of ``plugins`` on the fixture (a few seconds at most)."""
    fx = fixture or ContractFixture()
    train, test = fx.data_factory()
    args = dict(model=fx.model_factory(), train=train, test=test, num_clients=fx.num_clients, rounds=rounds,
                seed=fx.seed)
    args.update(kwargs)
    return Pipeline(list(plugins) + list(fx.companions)).run(**args)


class HookRecorder:
    """Records every hook call of a pipeline (pytest's ``HookRecorder``): ``rec.getcalls("fedcore_aggregate")``."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

        def before(hook_name: str, hook_impls: Sequence[HookImpl], kwargs: Mapping[str, Any]) -> None:
            self.calls.append((hook_name, dict(kwargs)))

        def after(outcome: Result[Any], hook_name: str, hook_impls: Sequence[HookImpl], kwargs: Mapping[str, Any]
                  ) -> None:
            pass

        self._undo = pipeline.plugin_manager.add_hookcall_monitoring(before, after)

    def getcalls(self, name: str) -> list[dict[str, Any]]:
        return [kw for n, kw in self.calls if n == name]

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]

    def finish(self) -> None:
        self._undo()
