"""Shared harnesses of the core's integration tests (docs/testing.md): one local Ray cluster per test run.

Every test that needs a Ray cluster in this process takes ``ray_cluster`` and carries
``pytest.mark.xdist_group("ray")``, so under ``scripts/dev test`` they all run on the one worker that started it.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One local Ray cluster for the whole run, started the way a run starts it: by a :class:`RayExecutor` that
    finds no Ray running (``start_local_cluster``: 2 CPUs, every socket on loopback; one actor, one round).
    Stopped at the end of the run."""
    ray = pytest.importorskip("ray")
    from fedcore.builtin import UniformSync
    from fedcore.engine.ray_executor import RayExecutor
    from fedcore.testing import ContractFixture, run_tiny_pipeline

    started = not ray.is_initialized()
    if started:
        run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=1, fixture=ContractFixture(num_clients=2),
                          executor=RayExecutor(num_workers=1, init_kwargs={"num_cpus": 2}))
        assert ray.is_initialized()
    yield ray
    if started:
        ray.shutdown()
