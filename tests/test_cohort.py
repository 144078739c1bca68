"""The cohort slot: a lockstep cohort trainer passes the contract checks, broken ones fail them, and the
engine hands every wave to the slot (inline: one cohort), with per-client failures kept per client."""
from __future__ import annotations

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import PerJobCohort, SGDUpdate, UniformSync
from fedcore.data import batches
from fedcore.stash import StashKey
from fedcore.testing import (
    COHORT_CHECKS,
    ContractFixture,
    parametrize_with_checks,
    run_tiny_pipeline,
    tiny_data,
    tiny_model,
)
from fedcore.testing.cohort import (
    check_cohort_answers_every_job_in_order,
    check_cohort_does_not_mutate_the_global_model,
    check_cohort_is_deterministic,
    check_cohort_uses_each_clients_channel,
)
from fedcore.types import ClientFailed, ClientUpdate

STEPS = StashKey[list]("test.lockstep_steps")


@attrs.frozen(eq=False, kw_only=True)
class LockstepSGD:
    """Steps every client of the wave one minibatch at a time, in turn (batch 0 of all clients, then batch 1...).

    Plain SGD per client on its own share, shuffled by its own ``ctx.rng("shuffle")``; with ``report`` each
    client also reports its per-batch loss to the server over its own channel (per-batch traffic).
    """

    lr: float = 0.05
    batch_size: int = 32
    report: bool = False

    def _route(self, jobs, job):  # where a client's per-batch report goes (overridden by a broken variant)
        return job.channel

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        streams, opts, sums = [], [], []
        for job in jobs:
            indices = job.select_data()
            job.share.module.train()
            params = [p for p in job.share.module.parameters() if p.requires_grad]
            opts.append(torch.optim.SGD(params, lr=self.lr))
            streams.append(iter(batches(job.dataset, indices, self.batch_size, generator=job.ctx.rng("shuffle"))))
            sums.append([0.0, 0])
        steps = []
        live = list(range(len(jobs)))
        step = 0
        while live:
            for i in list(live):
                batch = next(streams[i], None)
                if batch is None:
                    live.remove(i)
                    continue
                x, y = batch
                loss = nn.functional.cross_entropy(jobs[i].share.module(x), y)
                opts[i].zero_grad(set_to_none=True)
                loss.backward()
                opts[i].step()
                sums[i][0] += float(loss.detach()) * len(y)
                sums[i][1] += len(y)
                steps.append((step, jobs[i].client.id))
                if self.report:
                    self._route(jobs, jobs[i]).up("loss", loss.detach().reshape(1))
            step += 1
        if ctx.run is not None:
            ctx.run.stash.setdefault(STEPS, []).append(steps)
        return [ClientUpdate.from_share(job.share, num_examples=n, metrics={"loss": total / max(n, 1)},
                                        client_id=job.client.id)
                for job, (total, n) in zip(jobs, sums)]


@attrs.frozen(eq=False, kw_only=True)
class ReversedCohort(LockstepSGD):
    """Broken: answers in reverse job order."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        return list(reversed(LockstepSGD.fedcore_train_cohort(self, jobs=jobs, ctx=ctx)))


@attrs.frozen(eq=False, kw_only=True)
class OneChannelCohort(LockstepSGD):
    """Broken: every client's per-batch report goes over the first client's channel."""

    report: bool = True

    def _route(self, jobs, job):
        return jobs[0].channel


@attrs.frozen(eq=False, kw_only=True)
class GlobalTouchingCohort(LockstepSGD):
    """Broken: trains, then writes client 0's weights into the global model."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        out = LockstepSGD.fedcore_train_cohort(self, jobs=jobs, ctx=ctx)
        ctx.run.server.model.load_state_dict(jobs[0].share.module.state_dict())
        return out


@attrs.frozen(eq=False, kw_only=True)
class UnseededCohort(LockstepSGD):
    """Broken: adds noise from torch's global RNG, which the default cohort seeds but this one never does."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        out = LockstepSGD.fedcore_train_cohort(self, jobs=jobs, ctx=ctx)
        return [attrs.evolve(u, tensors={k: v + 0.01 * torch.randn_like(v) for k, v in u.tensors.items()}) for u in out]


@parametrize_with_checks([LockstepSGD(), LockstepSGD(report=True)])  # PerJobCohort(): test_registered_contracts
def test_contract(component, check):
    check(component)


@pytest.mark.parametrize(("broken", "check", "message"), [
    (ReversedCohort(), check_cohort_answers_every_job_in_order, "in the place of client"),
    (OneChannelCohort(), check_cohort_uses_each_clients_channel, "own channel"),
    (GlobalTouchingCohort(), check_cohort_does_not_mutate_the_global_model, "changed the global model"),
    (UnseededCohort(), check_cohort_is_deterministic, "the same seed gave different"),
])
def test_broken_cohorts_fail_the_check_written_for_them(broken, check, message):
    with pytest.raises(AssertionError, match=message):
        check(broken, fixture=ContractFixture())


def test_cohort_checks_are_offered_for_every_cohort_provider():
    from fedcore.testing import checks_for

    names = {c.__name__ for c in checks_for(LockstepSGD())}
    assert {c.__name__ for c in COHORT_CHECKS} <= names


def test_lockstep_steps_clients_batch_by_batch_and_matches_the_per_job_run():
    fixture = ContractFixture(num_clients=3, data_factory=lambda: tiny_data(n=192))
    lockstep = run_tiny_pipeline([LockstepSGD(lr=0.05, batch_size=16)], rounds=2, fixture=fixture)
    per_job = run_tiny_pipeline([SGDUpdate(lr=0.05, batch_size=16)], rounds=2, fixture=fixture)
    waves = lockstep.run.stash[STEPS]
    assert len(waves) == 2  # inline: one cohort per round, holding the whole wave
    first = waves[0]
    assert [c for s, c in first if s == 0] == [0, 1, 2]  # batch 0 of every client before any client's batch 1
    assert max(s for s, _ in first) >= 2
    # each client's arithmetic is its own, so interleaving changes nothing (tiny_mlp has no dropout)
    wall = ("wall_s", "round_wall_s")
    assert [{k: v for k, v in r.items() if k not in wall} for r in lockstep.history] == \
           [{k: v for k, v in r.items() if k not in wall} for r in per_job.history]
    for k, v in lockstep.model.state_dict().items():
        assert torch.equal(v, per_job.model.state_dict()[k]), k


@attrs.frozen(eq=False, kw_only=True)
class FailsClientOne:
    """SGD, except that client 1 raises."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        if client.id == 1:
            raise RuntimeError("battery died")
        return SGDUpdate().fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)


def test_a_failing_client_in_the_default_cohort_fails_alone():
    h = run_tiny_pipeline([FailsClientOne()], rounds=2).history
    assert all(r["clients"] == [0, 2] for r in h)
    assert [r["failed"] for r in h] == [[{"client": 1, "error": "RuntimeError: battery died"}]] * 2


@attrs.frozen(eq=False, kw_only=True)
class CohortRaises:
    """A cohort trainer that fails as a whole."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        raise RuntimeError("out of memory")


@attrs.frozen(eq=False, kw_only=True)
class CohortFailsOne(LockstepSGD):
    """A cohort trainer that reports one client as failed and trains the others."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        out = LockstepSGD.fedcore_train_cohort(self, jobs=jobs, ctx=ctx)
        return [ClientFailed(client_id=j.client.id, error="ValueError: bad sensor") if j.client.id == 2 else u
                for j, u in zip(jobs, out)]


def test_cohort_failures_are_reported_per_client():
    whole = run_tiny_pipeline([CohortRaises()], rounds=1).history[0]
    assert whole["clients"] == [] and [f["client"] for f in whole["failed"]] == [0, 1, 2]
    assert {f["error"] for f in whole["failed"]} == {"RuntimeError: out of memory"}
    one = run_tiny_pipeline([CohortFailsOne()], rounds=1).history[0]
    assert one["clients"] == [0, 1] and one["failed"] == [{"client": 2, "error": "ValueError: bad sensor"}]


def test_a_pipeline_names_its_cohort_provider_and_config_can_choose_it():
    pipe = fedcore.Pipeline([UniformSync()])
    assert isinstance(pipe.provider("cohort"), PerJobCohort)
    assert fedcore.Pipeline.from_config({"cohort": "per-job"}).describe()["slots"]["cohort"] == "per-job"


def test_hook_fedcore_train_cohort():
    """fedcore_train_cohort receives the whole wave once per dispatch, each job on its own channel."""
    from fedcore.testing import HookRecorder

    train, test = tiny_data()
    pipe = fedcore.Pipeline([UniformSync(fraction=1.0)])
    rec = HookRecorder(pipe)
    pipe.run(model=tiny_model(), train=train, test=test,
             num_clients=3, rounds=2)
    calls = rec.getcalls("fedcore_train_cohort")
    assert len(calls) == 2
    for r, call in enumerate(calls):
        jobs = call["jobs"]
        assert [j.client.id for j in jobs] == [0, 1, 2] and {j.ctx.round for j in jobs} == {r}
        assert len({id(j.channel) for j in jobs}) == 3 and [j.channel.client_id for j in jobs] == [0, 1, 2]
        assert call["ctx"].round == r and call["ctx"].client_id is None
    assert len(rec.getcalls("fedcore_local_update")) == 6  # the default ran every job through the slot
