"""Small records passed through hooks.

Payloads are plain torch (``nn.Module``, ``dict[str, Tensor]``); these records only say what the
tensors mean. Records that describe a decision are frozen; the few that carry state the engine owns
(:class:`ClientState`, :class:`ServerState`) are mutable on purpose and say so.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import torch
from torch import nn

from fedcore.indices import IndexList, index_lists
from fedcore.stash import Stash
from fedcore.uploads import Upload, needs_individual_updates, non_weight_uploads, require_mean_aggregator

TensorDict = dict[str, torch.Tensor]


def _names(value: Iterable[str]) -> tuple[str, ...]:  # typed converters: mypy cannot type ``converter=tuple``
    return tuple(value)


def _indices(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


def _as_index_tuple(value: Iterable[Iterable[int]]) -> tuple[IndexList, ...]:
    return index_lists(value)  # compact per-client index arrays (fedcore.indices): 8 bytes an index


@attrs.frozen(kw_only=True)
class ClientInfo:
    """Who a client is: its id, how many samples it holds and its device profile name."""

    id: int
    num_samples: int
    profile: str | None = None


@attrs.frozen(kw_only=True)
class Partition:
    """Which samples each client holds.

    ``train[c]`` are indices into the training set held by client ``c``; ``test[c]``, when given,
    are indices into the test set that form client ``c``'s personal test split (paired partitions,
    few-shot class splits). ``pool[c]`` optionally lists candidate samples a data-selection
    component may draw from (CaFPT's candidate pool); when absent the pool is ``train[c]``.
    Each client's indices are an :class:`~fedcore.indices.IndexList`: a read-only sequence of ``int`` equal to
    the tuple of its values, stored as one 64-bit array (a partition of 10⁵ clients stays small).
    """

    train: tuple[IndexList, ...] = attrs.field(converter=_as_index_tuple)
    test: tuple[IndexList, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_as_index_tuple)
    )
    pool: tuple[IndexList, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_as_index_tuple)
    )

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def sizes(self) -> list[int]:
        return [len(p) for p in self.train]


@attrs.frozen(kw_only=True, eq=False)
class Share:
    """The part of the global model a client receives, runs and trains this round.

    ``module`` is the client's own working copy (the engine never trains the global model).
    ``download`` names the ``module.state_dict()`` entries that come from the server this round:
    only they cross the network (frozen parts a device already holds, such as a frozen backbone
    or the base weights under LoRA, are not sent again). ``upload`` names what the client sends back.
    ``endpoint`` is the server side of a split model (split learning); ``None`` when the client
    holds everything it runs. ``meta`` records the shape of the share (cut layer, rank, mask)
    for the cost model and the history, and reaches the aggregator as ``ClientUpdate.meta`` (a sliced
    submodel's index map, a client's LoRA rank). What one component tells another of the same method goes in as a
    typed attrs record under the method's key, read back with ``isinstance``, not as a string-keyed dict (a record
    is checkpointed field by field with the updates in flight). ``kinds`` labels entries that are not weights (features,
    logits) with their ledger kind; unlisted entries cross as ``weights``. ``signature`` names the version
    of the share's shape (a LoRA share: its stage and rank); the engine copies it into
    ``ClientUpdate.share_signature`` so that ``fedcore_adapt_update`` can tell a stale update made for another
    share. ``None``: a share whose shape never changes. ``aux`` holds the server-held tensors that came down
    with the share (:class:`ServerTensors`: control variates, a global prototype, a teacher's logits); the engine
    fills it at dispatch, a split provider leaves it empty.
    """

    module: nn.Module
    download: tuple[str, ...] = attrs.field(converter=_names)
    upload: tuple[str, ...] = attrs.field(converter=_names)
    endpoint: Any = None
    meta: Mapping[str, Any] = attrs.field(factory=dict)
    kinds: Mapping[str, str] = attrs.field(factory=dict)
    signature: str | None = None
    aux: TensorDict = attrs.field(factory=dict, repr=False)

    def trainable(self) -> tuple[str, ...]:
        return tuple(n for n, p in self.module.named_parameters() if p.requires_grad)


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Message:
    """Traffic a client job will send, stated for a dry run (``fedcore plan``): ``count`` messages of ``nbytes``
    each, one way, under one ledger ``kind`` (``smashed``, ``input-grad``, ``features``, ``weights``, ...).

    :meth:`tensors` states a payload by its tensors (meta tensors are fine: only their sizes are read), so the bytes
    are counted exactly as :class:`fedcore.Channel` counts a real send.
    """

    direction: str = attrs.field(validator=attrs.validators.in_(("up", "down")))
    kind: str
    nbytes: int = attrs.field(validator=attrs.validators.ge(0))
    count: int = attrs.field(default=1, validator=attrs.validators.ge(0))

    @classmethod
    def tensors(cls, direction: str, kind: str, payload: Any, *, count: int = 1) -> Message:
        from fedcore.network import payload_nbytes

        return cls(direction=direction, kind=kind, nbytes=payload_nbytes(payload), count=count)

    @property
    def total(self) -> int:
        return self.nbytes * self.count


@attrs.frozen(kw_only=True)
class JobPlan:
    """What one client job does in a round, stated without running it: the answer to ``fedcore_plan_job``.

    ``messages`` is everything the job sends after the server's download of ``share.download`` (which the dry run
    counts itself): per-batch traffic with a server endpoint, and the upload (:func:`upload_messages` gives the
    usual one, ``share.upload`` read from the module). ``train_samples`` and ``eval_samples`` are the samples the
    forward of ``share.module`` itself processes with and without a backward, as the job's meter counts them
    (:mod:`fedcore.runtime.meter`; a loop that calls a submodule is not counted, and the clock then prices
    ``num_examples`` samples of training). ``steps`` is the number of optimiser steps, ``batch_size`` the largest
    batch (the memory estimate's), ``num_examples`` the update's weight.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    train_samples: int
    eval_samples: int = 0
    num_examples: int
    steps: int = 0
    batch_size: int | None = None
    notes: tuple[str, ...] = attrs.field(default=(), converter=_names)


def upload_messages(share: Share, values: Mapping[str, torch.Tensor] | None = None) -> tuple[Message, ...]:
    """The upload of ``share.upload`` as the engine sends it: one message per ledger kind (``share.kinds``,
    unlisted entries as ``weights``), entries read from ``values`` (default: the share module's state dict)."""
    state = dict(values) if values is not None else share.module.state_dict()
    missing = [k for k in share.upload if k not in state]
    if missing:
        raise KeyError(f"the share uploads entries its module does not have: {missing[:8]}; a local update that "
                       f"uploads computed values states them in fedcore_plan_job")
    groups: dict[str, int] = {}
    for name in share.upload:
        kind = share.kinds.get(name, "weights")
        groups[kind] = groups.get(kind, 0) + state[name].numel() * state[name].element_size()
    if not groups:
        groups["weights"] = 0  # the engine sends an empty message when there is nothing to upload
    return tuple(Message(direction="up", kind=k, nbytes=n) for k, n in groups.items())


@attrs.frozen(kw_only=True)
class ClientData:
    """A client's data for one round: the dataset and the selected indices into it."""

    dataset: Any
    indices: tuple[int, ...] = attrs.field(converter=_indices)

    def __len__(self) -> int:
        return len(self.indices)


@attrs.frozen(kw_only=True, eq=False)
class ClientUpdate:
    """What a client sends back after its local update.

    ``tensors`` are the new values of the uploaded entries (not deltas), ``base`` the values the
    client started from (so aggregators that need deltas, such as FedBuff, can form them without
    the engine keeping copies), ``num_examples`` the weight for sample-weighted averaging.
    The engine fills in the rest on the server: ``client_id`` (a local update need not pass it; ``-1``
    until then), ``base`` (from what the server sent), ``version`` (the global version the client started
    from), ``staleness``, the share's ``meta`` under the update's own ``meta`` (the update's keys win) and
    ``share_signature`` (the ``Share.signature`` of the share it was made for). Build one from a trained share
    with :meth:`from_share`. ``aux`` holds auxiliary tensors bound for the server that are not model entries (a
    control-variate delta, features, logits): they cross the network under their own ledger kinds
    (:class:`ServerTensors`) and never reach a weight aggregator as ``tensors``.
    """

    client_id: int = -1
    tensors: TensorDict = attrs.field(repr=False)
    num_examples: int
    base: TensorDict = attrs.field(factory=dict, repr=False)
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    version: int = 0
    staleness: int = 0
    meta: Mapping[str, Any] = attrs.field(factory=dict)
    share_signature: str | None = None
    aux: TensorDict = attrs.field(factory=dict, repr=False)

    @classmethod
    def from_share(cls, share: Share, values: nn.Module | Mapping[str, torch.Tensor] | None = None, *,
                   num_examples: int, metrics: Mapping[str, float] | None = None,
                   meta: Mapping[str, Any] | None = None, client_id: int = -1) -> ClientUpdate:
        """The update that uploads exactly ``share.upload``, read from ``values`` (a module, a state dict,
        or by default ``share.module``): ``ClientUpdate.from_share(share, num_examples=len(data))``.

        A missing entry is a ``KeyError`` naming it; tensors are taken as they are (the upload copies them).
        ``client_id`` may be left to the engine, except in a cohort trainer's answers (``job.client.id``).
        """
        if values is None:
            values = share.module
        state = values.state_dict() if isinstance(values, nn.Module) else values
        missing = [k for k in share.upload if k not in state]
        if missing:
            raise KeyError(f"the share uploads entries the trained values do not have: {missing[:8]}")
        return cls(client_id=client_id, tensors={k: state[k] for k in share.upload}, num_examples=num_examples,
                   metrics=dict(metrics or {}), meta=dict(meta or {}))

    def delta(self) -> TensorDict:
        """``tensors - base`` for every uploaded entry that has a base value."""
        missing = sorted(k for k in self.tensors if k not in self.base)
        if missing:
            raise KeyError(f"update of client {self.client_id} has no base value for {missing}")
        return {k: v - self.base[k] for k, v in self.tensors.items()}


@attrs.frozen(kw_only=True)
class DropUpdate:
    """A ``fedcore_adapt_update`` answer: the stale update cannot be used; ``reason`` lands in the history row."""

    reason: str


@attrs.frozen(kw_only=True)
class ClientFailed:
    """One client of a cohort failed (``fedcore_train_cohort``): the engine reports it, the others go on.

    ``error`` is the formatted traceback (its last line lands in the history row's ``failed`` entry).
    """

    client_id: int
    error: str


@attrs.frozen(kw_only=True, eq=False)
class AggregateResult:
    """The next global state.

    ``state`` holds new values for the global entries it names (entries not named keep their
    value). ``per_client`` optionally gives a different download for individual clients (a
    personalised aggregate, e.g. PromptAMP); the engine loads it into that client's share (the
    entries the share downloads) the next time the client is dispatched, whatever the split. ``metrics`` lands in the
    round's history row. ``virtual_seconds`` is the virtual time the aggregation itself takes (the message rounds of
    a secure-aggregation protocol): the engine advances its clock by it before the next round.
    """

    state: TensorDict = attrs.field(repr=False)
    per_client: Mapping[int, TensorDict] = attrs.field(factory=dict, repr=False)
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    virtual_seconds: float = 0.0


@attrs.define(kw_only=True, eq=False)
class ClientState:
    """State that stays on one client across rounds and never crosses the network.

    ``tensors`` are client-local tensors (personal heads, a prompt's personal part, a feature
    memory) and are checkpointed; ``stash`` holds per-plugin values under typed keys
    (pytest's Stash idea). Mutable on purpose: the engine owns one per client.
    """

    client_id: int
    """Whose state it is."""
    tensors: TensorDict = attrs.field(factory=dict, repr=False)
    """Client-local tensors (personal heads, feature memories): never sent, checkpointed."""
    stash: Stash = attrs.field(factory=Stash, repr=False)
    """Per-plugin client values under ``StashKey``s (checkpointed)."""
    rounds_participated: int = 0
    """How many updates it has uploaded (trained and sent, whether or not they were aggregated)."""


AUX_KIND = "aux"
"""The ledger kind of a server-state tensor whose kind was not declared."""


def aux_kind(kinds: Mapping[str, str], name: str) -> str:
    """The ledger kind of server-state tensor ``name``: declared for the name itself or for a dotted prefix of it
    (``"scaffold.dc"`` covers ``"scaffold.dc.0.weight"``; the longest wins), else :data:`AUX_KIND`."""
    probe = name
    while True:
        if probe in kinds:
            return kinds[probe]
        if "." not in probe:
            return AUX_KIND
        probe = probe.rsplit(".", 1)[0]


@attrs.define(kw_only=True, eq=False)
class ServerTensors:
    """A method's server-held tensors beyond the global model, and which of them go down with each share.

    The server-state channel: ``shared`` holds tensors for every client (a global control variate, a global
    prototype), ``per_client`` tensors for one client (a teacher's logits of its samples, FedDyn's per-client
    state). Names are the method's own (prefix them: ``"scaffold.c"``). :meth:`keep` and :meth:`keep_for` store a
    tensor and declare its ledger kind; ``send=True`` puts it in every share's download from then on (the client
    reads it as ``share.aux[name]``; a per-client tensor wins over a shared one of the same name). A client sends
    tensors up in ``ClientUpdate.aux``; :meth:`declare` gives their names a ledger kind before they cross (a
    dotted prefix covers every name under it; undeclared names cross as ``"aux"``): declare in
    ``fedcore_run_start``. The aggregator or a ``fedcore_client_done`` observer reads ``update.aux`` and keeps what
    it needs. Everything here is checkpointed with the server and restored on resume.
    """

    shared: dict[str, torch.Tensor] = attrs.field(factory=dict, repr=False)
    per_client: dict[int, dict[str, torch.Tensor]] = attrs.field(factory=dict, repr=False)
    kinds: dict[str, str] = attrs.field(factory=dict)
    send: list[str] = attrs.field(factory=list)

    def declare(self, name: str, *, kind: str, send: bool = False) -> None:
        """Give ``name`` (down or up) its ledger kind; ``send``: it goes down with every share from now on."""
        if not kind or kind == "weights":
            raise ValueError(f"server-state tensor {name!r} needs its own ledger kind, not {kind!r}")
        self.kinds[name] = kind
        if send and name not in self.send:
            self.send.append(name)

    def keep(self, name: str, value: torch.Tensor, *, kind: str | None = None, send: bool | None = None) -> None:
        """Hold ``value`` for every client under ``name`` (``kind``/``send`` as :meth:`declare`, once is enough)."""
        self._declare_once(name, kind, send)
        self.shared[name] = value

    def keep_for(self, client: int, name: str, value: torch.Tensor, *, kind: str | None = None,
                 send: bool | None = None) -> None:
        """Hold ``value`` for ``client`` under ``name``."""
        self._declare_once(name, kind, send)
        self.per_client.setdefault(int(client), {})[name] = value

    def get(self, name: str, client: int | None = None, default: Any = None) -> Any:
        """The client's own tensor ``name`` if it has one, else the shared one, else ``default``."""
        own = self.per_client.get(int(client), {}) if client is not None else {}
        return own[name] if name in own else self.shared.get(name, default)

    def download_for(self, client: int) -> TensorDict:
        """What goes down with ``client``'s share: every sent name the client or everyone has, in send order."""
        own = self.per_client.get(int(client), {})
        return {n: own[n] if n in own else self.shared[n] for n in self.send if n in own or n in self.shared}

    def kind_of(self, name: str) -> str:
        return aux_kind(self.kinds, name)

    def __bool__(self) -> bool:
        return bool(self.shared or self.per_client or self.kinds or self.send)

    def _declare_once(self, name: str, kind: str | None, send: bool | None) -> None:
        if kind is not None:
            self.declare(name, kind=kind)
        if send and name not in self.send:
            self.send.append(name)
        elif send is False and name in self.send:
            self.send.remove(name)


@attrs.define(kw_only=True, eq=False)
class ServerState:
    """What the server holds: the global model, its version and per-plugin server state.

    ``client_views`` keeps the per-client downloads an aggregator returned (see
    :class:`AggregateResult`). ``aux`` is the server-state channel (:class:`ServerTensors`): a method's
    server-held tensors, the part of them sent down with each share, the kinds they cross under.
    Mutable on purpose: the engine owns it; ``fedcore_round_start``
    observers may change ``model`` (for example, a stage switch that injects adapters).
    """

    model: nn.Module
    """The global model (observers of ``fedcore_round_start`` may replace it)."""
    version: int = 0
    """How many aggregations the global model has had (an update's ``staleness`` counts from it)."""
    stash: Stash = attrs.field(factory=Stash, repr=False)
    """Server-side per-plugin state under ``StashKey``s (checkpointed)."""
    client_views: dict[int, TensorDict] = attrs.field(factory=dict, repr=False)
    """Per-client downloads an aggregator returned (`AggregateResult.per_client`)."""
    aux: ServerTensors = attrs.field(factory=ServerTensors, repr=False)
    """Server-held tensors for clients and from them (the server-state channel, docs/hooks.md; checkpointed)."""


__all__ = [
    "AggregateResult", "ClientData", "ClientInfo", "ClientState", "ClientUpdate", "DropUpdate", "JobPlan", "Message",
    "Partition", "ServerState", "ServerTensors", "Share", "TensorDict", "Upload", "needs_individual_updates",
    "non_weight_uploads", "require_mean_aggregator", "upload_messages",
]
