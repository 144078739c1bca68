"""One client's work for one dispatch: select data, train, upload.

A job is a plain record so that any executor (inline, Ray) can run it; the result carries the
update, the client's state (it lives on the client and comes back with it), what crossed the
client's channel, and the traceback if the client raised.
"""
from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any

import attrs
import torch

from fedcore.engine.context import RoundContext
from fedcore.engine.network import Channel, Transfer, send_entries
from fedcore.runtime.meter import count_samples
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share, TensorDict

if TYPE_CHECKING:
    from fedcore.pipeline import Hooks


@attrs.frozen(kw_only=True, eq=False)
class ClientJob:
    client: ClientInfo
    share: Share
    downloaded: TensorDict
    pool: tuple[int, ...]
    state: ClientState
    ctx: RoundContext
    version: int


@attrs.frozen(kw_only=True, eq=False)
class JobResult:
    client_id: int
    update: ClientUpdate | None
    state: ClientState
    rows: tuple[Transfer, ...]
    wall_s: float
    error: str | None = None
    share_meta: dict[str, Any] = attrs.field(factory=dict)
    work: dict[str, int] = attrs.field(factory=dict)  # samples the share's module processed (fedcore.runtime.meter)


def seed_torch(seed: int) -> None:
    """``torch.manual_seed``, minus its lazy per-device seeding calls when no accelerator is available.

    Those calls format a stack trace per device type (~0.25 ms per client job, ~1% of a micro-model round);
    without an accelerator only the CPU generator can ever be used, so seeding it alone is the same thing.
    """
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.random.default_generator.manual_seed(seed)


def run_client_job(hooks: Hooks, job: ClientJob, dataset: Any) -> JobResult:
    """Run ``fedcore_select_data`` and ``fedcore_local_update`` for one client and upload the result.

    The torch global RNG is seeded from ``(seed, round, client)`` inside a fork, so dropout and
    friends are reproducible without disturbing the caller's random state.
    """
    ctx = job.ctx
    channel = ctx.channel if ctx.channel is not None else Channel(job.client.id, ctx.round)
    start = time.perf_counter()
    work: dict[str, int] = {}
    try:
        with torch.random.fork_rng(devices=[]), count_samples(job.share.module) as work:
            seed_torch(ctx.seed_for("torch"))
            indices = hooks.fedcore_select_data(
                client=job.client, indices=job.pool, dataset=dataset, share=job.share, state=job.state, ctx=ctx
            )
            data = ClientData(dataset=dataset, indices=indices)
            update = hooks.fedcore_local_update(client=job.client, share=job.share, data=data, state=job.state, ctx=ctx)
        base = {k: job.downloaded[k] for k in update.tensors if k in job.downloaded}
        sent = send_entries(channel.up, update.tensors, job.share.kinds)
        update = attrs.evolve(update, tensors=sent, base=base, version=job.version, client_id=job.client.id,
                              meta={**job.share.meta, **update.meta})
        job.state.rounds_participated += 1
        error = None
    except Exception:  # a client failure is reported, never a crash of the run
        update, error = None, traceback.format_exc()
    return JobResult(
        client_id=job.client.id, update=update, state=job.state, rows=tuple(channel.rows),
        wall_s=time.perf_counter() - start, error=error, share_meta=dict(job.share.meta), work=dict(work),
    )
