"""The default cohort: every job of a wave on its own, through ``select_data`` and ``local_update``."""
from __future__ import annotations

from collections.abc import Sequence
import traceback
from typing import TYPE_CHECKING, ClassVar

import attrs

import fedcore
from fedcore.types import ClientFailed, ClientUpdate

if TYPE_CHECKING:
    from fedcore.contexts import RoundContext
    from fedcore.engine.client_job import ClientJob


@attrs.frozen(eq=False, kw_only=True)
class PerJobCohort:
    """Trains the clients of a wave one after another, each exactly as a lone client would be.

    Per job: torch's global RNG is seeded from ``(seed, round, client)`` inside a fork
    (:meth:`~fedcore.engine.client_job.ClientJob.torch_rng`), then ``fedcore_select_data`` and
    ``fedcore_local_update`` run on the job's share and context. A client that raises is reported as failed
    (:class:`~fedcore.types.ClientFailed`); the others go on. Each finished client is reported to the
    ``fedcore_client_trained`` observers at once. Jobs share nothing, so the threads executor may run several of
    these cohorts at once (``thread_safe``).
    """

    thread_safe: ClassVar[bool] = True

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs: Sequence[ClientJob], ctx: RoundContext) -> list[ClientUpdate | ClientFailed]:
        out: list[ClientUpdate | ClientFailed] = []
        for job in jobs:
            try:
                with job.torch_rng():
                    update = job.local_update(job.select_data())
                out.append(attrs.evolve(update, client_id=job.client.id))
            except Exception:  # a client failure is reported, never a crash of the run
                out.append(ClientFailed(client_id=job.client.id, error=traceback.format_exc()))
            job.trained(out[-1])  # observers (a progress display) follow client by client
        return out
