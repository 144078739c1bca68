"""Contract checks for ``fedcore_train_cohort`` providers (cohort trainers).

Each check builds a fresh engine on the fixture, cuts every client's share (downloads sent, as at a
real dispatch) and hands the whole wave to the component. The checks say what the engine relies on:
one answer per job in job order with matching client ids; every client's traffic on its own channel;
the global model untouched; the same updates for the same seed whatever torch's global RNG holds.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

from fedcore.engine.dispatch import build_job
from fedcore.jobs import ClientJob, JobResult, cohort_problem, run_cohort
from fedcore.runtime.job_rng import seed_torch
from fedcore.testing.fixtures import ContractFixture, build_engine, round_context
from fedcore.types import ClientFailed, ClientUpdate


def _wave(component: Any, fixture: ContractFixture, clients: Sequence[int] | None = None
          ) -> tuple[Any, list[ClientJob]]:
    engine = build_engine([component], fixture)
    run = engine.run_ctx
    ctx = round_context(engine)
    chosen = [c for c in run.clients if clients is None or c.id in clients]
    return engine, [build_job(engine.parts, c, ctx)[0] for c in chosen]


def _train(component: Any, fixture: ContractFixture, clients: Sequence[int] | None = None,
           rng_noise: int = 0) -> list[JobResult]:
    engine, jobs = _wave(component, fixture, clients)
    with torch.random.fork_rng(devices=[]):
        seed_torch(rng_noise)  # the caller's global RNG must not matter
        results = run_cohort(engine.hooks, jobs, engine.run_ctx.train)
    failed = [(r.client_id, (r.error or "").strip().splitlines()[-1:]) for r in results if r.error is not None]
    assert not failed, f"the cohort failed on the fixture: {failed}"
    return results


def _traffic(result: JobResult) -> list[tuple[str, str, int]]:
    return [(r.direction, r.kind, r.nbytes) for r in result.rows]


def check_cohort_answers_every_job_in_order(component: Any, fixture: ContractFixture) -> None:
    engine, jobs = _wave(component, fixture)
    bound = [attrs.evolve(j, dataset=engine.run_ctx.train, hooks=engine.hooks) for j in jobs]
    with torch.random.fork_rng(devices=[]):
        out = engine.hooks.fedcore_train_cohort(jobs=bound, ctx=round_context(engine))
    problem = cohort_problem(bound, out)
    assert problem is None, f"fedcore_train_cohort {problem}"
    for job, update in zip(bound, out):
        assert not isinstance(update, ClientFailed), f"client {job.client.id} failed on the fixture:\n{update.error}"
        assert isinstance(update, ClientUpdate)
        assert update.client_id == job.client.id, (
            f"answer {bound.index(job)} is for client {update.client_id}, in the place of client {job.client.id}: "
            f"answer each job in job order and name its client (ClientUpdate.from_share(..., client_id=job.client.id))")
        extra = sorted(set(update.tensors) - set(job.share.upload))
        assert not extra, f"client {job.client.id}'s update has entries its share does not upload: {extra}"


def check_cohort_uses_each_clients_channel(component: Any, fixture: ContractFixture) -> None:
    """Every client's traffic is the same whether it trains with the others or alone: nothing is routed
    over another client's channel."""
    together = _train(component, fixture)
    for result in together:
        assert {r.client for r in result.rows} <= {result.client_id}
        alone = _train(component, fixture, clients=[result.client_id])[0]
        assert _traffic(result) == _traffic(alone), (
            f"client {result.client_id}'s channel carried {_traffic(result)} in the cohort but {_traffic(alone)} "
            f"alone: per-client traffic must go over that client's own channel (job.ctx.channel)")


def check_cohort_does_not_mutate_the_global_model(component: Any, fixture: ContractFixture) -> None:
    engine, jobs = _wave(component, fixture)
    before = {k: v.detach().clone() for k, v in engine.run_ctx.server.model.state_dict().items()}
    run_cohort(engine.hooks, jobs, engine.run_ctx.train)
    after = engine.run_ctx.server.model.state_dict()
    changed = sorted(k for k, v in before.items() if not torch.equal(v, after[k]))
    assert not changed, f"the cohort changed the global model's entries {changed[:6]}; train the shares' modules"


def check_cohort_is_deterministic(component: Any, fixture: ContractFixture) -> None:
    first = _train(component, fixture, rng_noise=1)
    second = _train(component, fixture, rng_noise=2)
    for a, b in zip(first, second):
        assert a.update is not None and b.update is not None
        assert a.update.tensors.keys() == b.update.tensors.keys()
        diff = sorted(k for k in a.update.tensors if not torch.equal(a.update.tensors[k], b.update.tensors[k]))
        assert not diff, (f"client {a.client_id}: the same seed gave different {diff[:4]}; draw randomness from "
                          f"job.ctx.rng(...) or seed torch from job.ctx.seed_for(...)")


COHORT_CHECKS = [check_cohort_answers_every_job_in_order, check_cohort_uses_each_clients_channel,
                 check_cohort_does_not_mutate_the_global_model, check_cohort_is_deterministic]
