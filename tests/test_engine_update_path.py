"""The straight update path: views applied once by the engine, base attached on the server, ledger booking by
channel, client ids set by the engine, ClientUpdate.from_share, RunSpec, adapted third-party policies and clocks."""
from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate, UniformSync, working_copy
from fedcore.engine.loop import Engine
from fedcore.engine.spec import RunSpec
from fedcore.errors import ConfigError
from fedcore.jobs import ClientJob
from fedcore.network import Channel, Ledger
from fedcore.runtime import ClockBase, SimClock
from fedcore.scheduling import SchedulerPolicy, sample_clients
from fedcore.stash import StashKey
from fedcore.testing import run_tiny_pipeline, tiny_data, tiny_model
from fedcore.types import AggregateResult, ClientUpdate, Share

ENGINE = Path(fedcore.__file__).parent / "engine"


def test_contract_types_are_public_and_old_engine_paths_still_work():
    from fedcore.engine.context import RoundContext as OldRound
    from fedcore.engine.network import Channel as OldChannel

    assert fedcore.RoundContext is OldRound and fedcore.Channel is OldChannel
    assert fedcore.RunContext.__module__ == "fedcore.contexts" and fedcore.Ledger.__module__ == "fedcore.network"
    assert {"RoundContext", "RunContext", "Channel", "Ledger", "Transfer"} <= set(fedcore.__all__)


def test_no_engine_module_is_over_400_lines_and_the_loop_probes_nothing():
    sizes = {p.name: len(p.read_text().splitlines()) for p in ENGINE.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes
    for name in ("loop.py", "dispatch.py", "arrivals.py", "record.py", "snapshot.py"):
        text = (ENGINE / name).read_text()
        assert "hasattr(" not in text and "getattr(" not in text, name


@attrs.frozen(eq=False, kw_only=True)
class HeadOnly:
    """Only the last layer crosses the network and trains."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, ctx):
        module = working_copy(model)
        head = tuple(k for k in module.state_dict() if k.startswith("3."))
        for name, p in module.named_parameters():
            p.requires_grad_(name.startswith("3."))
        return Share(module=module, download=head, upload=head)


@attrs.frozen(eq=False, kw_only=True)
class ViewForClientZero:
    """FedAvg, plus a personalised view for client 0 naming a downloaded entry and one that is not downloaded."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        avg = FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        return AggregateResult(state=avg.state, per_client={0: {"3.bias": torch.full((4,), 7.0),
                                                                "1.bias": torch.full((32,), 5.0)}})


SEEN = StashKey[list]("test.seen")


@attrs.frozen(eq=False, kw_only=True)
class Record:
    """Remembers what each client started from; returns an update without a client id (the engine sets it)."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        sd = share.module.state_dict()
        state.stash.setdefault(SEEN, []).append({k: v.clone() for k, v in sd.items()})
        update = SGDUpdate().fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
        return attrs.evolve(update, client_id=-1, base={k: torch.zeros_like(v) for k, v in update.tensors.items()})


@attrs.frozen(eq=False, kw_only=True)
class Arrivals:
    """Keeps every update as the server received it."""

    seen: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_client_done(self, update):
        self.seen.append(update)


def test_the_engine_applies_a_view_once_and_only_to_downloaded_entries():
    model = tiny_model()
    assert model.state_dict()["1.bias"].shape == (32,)
    result = run_tiny_pipeline([HeadOnly(), ViewForClientZero(), Record()], rounds=2)
    zero, one = (result.run.client_states[c].stash[SEEN] for c in (0, 1))
    assert torch.equal(zero[1]["3.bias"], torch.full((4,), 7.0))  # HeadOnly never looks at client_views
    assert not torch.equal(zero[1]["1.bias"], torch.full((32,), 5.0))  # not downloaded: never sent, never applied
    assert torch.equal(zero[1]["1.bias"], one[1]["1.bias"])


def test_client_ids_and_bases_are_set_by_the_server():
    arrivals = Arrivals()
    result = run_tiny_pipeline([Record(), arrivals, UniformSync()], rounds=2)
    assert [r["clients"] for r in result.history] == [[0, 1, 2], [0, 1, 2]]
    for update in arrivals.seen:  # the base is what the server sent, whatever the client claimed
        started = result.run.client_states[update.client_id].stash[SEEN][update.version]
        assert update.tensors.keys() == update.base.keys()
        assert all(torch.equal(update.base[k], started[k]) for k in update.base)
    assert "downloaded" not in attrs.fields_dict(ClientJob)  # nothing but the share travels to a worker


def test_the_ledger_books_each_channel_in_instalments():
    channel, ledger = Channel(3, 0), Ledger()
    channel.down("weights", torch.zeros(4))
    assert len(ledger.book(channel)) == 1 and ledger.book(channel) == ()
    channel.up("smashed", torch.zeros(2))
    channel.up("weights", torch.zeros(8))
    assert [r.kind for r in ledger.book(channel)] == ["smashed", "weights"]
    assert ledger.total(direction="up") == 40 and ledger.total(direction="down") == 16


def test_from_share_takes_exactly_the_upload():
    model = tiny_model()
    share = Share(module=model, download=("3.bias",), upload=("3.weight", "3.bias"))
    u = ClientUpdate.from_share(share, num_examples=5, metrics={"loss": 1.0})
    assert list(u.tensors) == ["3.weight", "3.bias"] and u.client_id == -1 and u.metrics == {"loss": 1.0}
    assert torch.equal(ClientUpdate.from_share(share, {"3.weight": torch.ones(1), "3.bias": torch.zeros(1)},
                                               num_examples=1).tensors["3.weight"], torch.ones(1))
    with pytest.raises(KeyError, match="3.bias"):
        ClientUpdate.from_share(share, {"3.weight": torch.ones(1)}, num_examples=1)


def test_run_spec_is_the_engine_input_and_checks_its_fields():
    train, test = tiny_data()
    spec = RunSpec(model=tiny_model(), train=train, test=test, num_clients=3, rounds=2, seed=4)
    a = Engine(fedcore.Pipeline([]), spec).run().history
    b = fedcore.Pipeline([]).run(model=tiny_model(), train=train, test=test, num_clients=3, rounds=2, seed=4).history
    assert [r["test_accuracy"] for r in a] == [r["test_accuracy"] for r in b]
    with pytest.raises(ConfigError, match="eval_every=0"):
        RunSpec(model=tiny_model(), train=train, num_clients=3, rounds=2, eval_every=0)
    with pytest.raises(ConfigError, match="profiles has 2 entries"):
        Engine(fedcore.Pipeline([]), attrs.evolve(spec, profiles=["a", "b"]))


class BareSync:
    """A third-party policy written against the protocol only: no base class, no optional members."""

    def dispatch(self, *, round, now, idle, busy, rng):
        return [] if busy else sample_clients(idle, 1.0, 1, rng)

    def ready(self, *, now, arrived, busy, since):
        return not busy

    def accepts(self, update, *, version):
        return False


@attrs.frozen(eq=False, kw_only=True)
class Schedule:
    """Serves a given policy object."""

    policy: object

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients, run):
        return self.policy


class FlatClock:
    """A third-party clock with only duration(): one virtual second per job."""

    def duration(self, client, result, *, share, round):
        return 1.0


def test_policies_and_clocks_without_the_base_classes_are_adapted_once():
    bare = run_tiny_pipeline([Schedule(policy=BareSync())], rounds=3, clock=FlatClock())
    plain = run_tiny_pipeline([UniformSync(fraction=1.0)], rounds=3, clock=FlatClock())
    wall = ("wall_s", "round_wall_s")
    assert [{k: v for k, v in r.items() if k not in wall} for r in bare.history] == \
           [{k: v for k, v in r.items() if k not in wall} for r in plain.history]
    assert [r["virtual_time"] for r in bare.history] == [1.0, 2.0, 3.0]
    assert issubclass(SimClock, ClockBase) and not hasattr(BareSync, "cancel")
    with pytest.raises(ConfigError, match="lacks accepts"):
        class NoAccepts(BareSync):
            accepts = None
        run_tiny_pipeline([Schedule(policy=NoAccepts())], rounds=1)
    with pytest.raises(ConfigError, match="no duration"):
        run_tiny_pipeline([], rounds=1, clock=object())


def test_builtin_policies_subclass_the_base():
    from fedcore.builtin import AsyncRounds, BufferedRounds, SemiAsyncRounds, SyncRounds

    for cls in (SyncRounds, AsyncRounds, BufferedRounds, SemiAsyncRounds):
        assert issubclass(cls, SchedulerPolicy), cls
    assert SchedulerPolicy().cancel(now=0.0, busy=[1]) == () and SchedulerPolicy().state_dict() == {}
    assert np.isscalar(ClockBase().availability(None))
