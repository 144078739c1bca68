"""Run and round contexts: what hooks may read about where they are in a run.

Contexts carry the seed-derived random streams, the network and the server/client state the engine
owns. Plugins keep their own state in a ``Stash`` under their own keys, never in globals.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from fedcore.network import Channel, Ledger
from fedcore.rng import derive_seed, numpy_generator, torch_generator
from fedcore.stash import Stash
from fedcore.types import ClientInfo, ClientState, Partition, ServerState


@attrs.define(kw_only=True, eq=False)
class RunContext:
    """One run: its seed, data, clients, server state, ledger and per-plugin stash.

    ``settings`` holds choices the run made while running that a resumed run must make the same way (the
    ``vectorised`` cohort's timed ``on_cpu = "auto"`` choice): JSON values, checkpointed, and written by
    ``fedcore run`` to ``manifest.json`` under ``decided``.
    """

    seed: int
    """The run's seed; every random stream derives from it (``rng``, ``np_rng``)."""
    num_clients: int
    """How many clients the run has."""
    rounds: int
    """How many rounds (aggregations) the run is asked for."""
    train: Any
    """The training set (a ``fedcore.data`` dataset); clients hold indices into it."""
    test: Any = None
    """The server's test set, or ``None``."""
    server: ServerState
    """The server's state: the global model, its version, its stash (``ServerState``)."""
    ledger: Ledger = attrs.field(factory=Ledger)
    """Every transfer between clients and server, by client, round and kind."""
    partition: Partition | None = None
    """Which samples each client holds (``None`` until the partition slot ran)."""
    clients: tuple[ClientInfo, ...] = ()
    """Every client: id, sample count, device profile (``ClientInfo``)."""
    client_states: dict[int, ClientState] = attrs.field(factory=dict)
    """Each client's ``ClientState`` by id: never sent, checkpointed."""
    stash: Stash = attrs.field(factory=Stash)
    """Run-level per-plugin state under ``StashKey``s (checkpointed)."""
    out_dir: Path | None = None
    """The run directory under ``fedcore run`` (``None`` in Python runs)."""
    settings: dict[str, Any] = attrs.field(factory=dict)
    """Choices the run made while running that a resumed run repeats (JSON, checkpointed)."""
    stop_reason: str | None = None
    """Why a component ended the run early (:meth:`request_stop`), or ``None`` while it runs on."""

    def request_stop(self, reason: str) -> None:
        """End the run early, e.g. a privacy budget spent: the round in progress finishes (its row is recorded),
        no further round starts, and the run ends ``finished`` with ``reason`` (the run directory's status says
        ``stopped``). Called again in ``fedcore_round_start`` of a resumed run, it stops before that round runs."""
        if self.stop_reason is None:
            self.stop_reason = str(reason)

    def rng(self, *purpose: object) -> torch.Generator:
        """A torch generator for a run-level purpose, e.g. ``run.rng("partition")``."""
        return torch_generator(self.seed, "run", *purpose)

    def np_rng(self, *purpose: object) -> np.random.Generator:
        return numpy_generator(self.seed, "run", *purpose)


@attrs.define(kw_only=True, eq=False)
class RoundContext:
    """One round (or, in asynchronous schedules, one dispatch wave) of a run.

    Server-side hooks see ``run``; client-side hooks (select data, local update) get a copy bound to
    one client with its ``channel`` and must talk to the server only through that channel or the
    share's endpoint: under a distributed executor ``run`` is ``None`` on the worker. ``info`` holds small
    notes for this round that every client-bound copy shares (and carries to a worker).
    """

    round: int
    """The round (dispatch wave) number, from 0."""
    seed: int
    """The run's seed (``rng``, ``np_rng`` and ``seed_for`` derive streams per round, client and purpose)."""
    run: RunContext | None = None
    """The run, on the server side; ``None`` in client code under a distributed executor."""
    client_id: int | None = None
    """The client a client-bound copy belongs to (``None`` on the server side)."""
    channel: Channel | None = None
    """The bound client's channel to the server (per-batch traffic, booked on the ledger)."""
    stash: Stash = attrs.field(factory=Stash)
    """Per-plugin values for this round only (not checkpointed)."""
    info: dict[str, Any] = attrs.field(factory=dict)
    """Small notes for this round that every client-bound copy shares (and carries to a worker)."""

    @property
    def server(self) -> ServerState:
        if self.run is None:
            raise RuntimeError("the server state is not reachable from client-side code")
        return self.run.server

    def rng(self, purpose: str, client: int | None = None) -> torch.Generator:
        """The stream for ``(seed, round, client, purpose)``; ``client`` defaults to the bound client."""
        c = self.client_id if client is None else client
        return torch_generator(self.seed, "round", self.round, "client", c, purpose)

    def np_rng(self, purpose: str, client: int | None = None) -> np.random.Generator:
        c = self.client_id if client is None else client
        return numpy_generator(self.seed, "round", self.round, "client", c, purpose)

    def seed_for(self, purpose: str, client: int | None = None) -> int:
        c = self.client_id if client is None else client
        return derive_seed(self.seed, "round", self.round, "client", c, purpose)

    def for_client(self, client_id: int, channel: Channel | None, *, remote: bool = False) -> RoundContext:
        return attrs.evolve(self, client_id=client_id, channel=channel, run=None if remote else self.run)
