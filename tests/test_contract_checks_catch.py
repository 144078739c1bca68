"""Each contract check catches a deliberately broken component and passes a correct one."""
from collections import defaultdict, namedtuple

import attrs
import numpy as np
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg
from fedcore.stash import StashKey
from fedcore.testing import CHECK_FIXTURE, checks_for
from fedcore.testing.contracts import check_aggregate_identity, check_aggregate_order_invariant, check_select
from fedcore.testing.resume import check_resume_equals_uninterrupted, check_stash_survives_checkpoint
from fedcore.types import AggregateResult, Share

VELOCITY = StashKey[dict]("test.velocity")


@attrs.frozen(eq=False, kw_only=True)
class ServerMomentum:
    """FedAvg plus server momentum kept in the server stash: stateful, yet order invariant."""

    beta: float = 0.9

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        mean = FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx).state
        current = model.state_dict()
        velocity = ctx.server.stash.get(VELOCITY) or {k: torch.zeros_like(v) for k, v in mean.items()}
        velocity = {k: self.beta * velocity[k] + (mean[k] - current[k]) for k in mean}
        ctx.server.stash[VELOCITY] = velocity
        return AggregateResult(state={k: current[k] + velocity[k] for k in mean})


@attrs.frozen(eq=False, kw_only=True)
class FirstWins:
    """Takes the first update as the aggregate: depends on client order."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        return AggregateResult(state={k: v.clone() for k, v in updates[0].tensors.items()})


def test_order_invariance_runs_each_order_on_fresh_state():
    check_aggregate_order_invariant(ServerMomentum(), fixture=CHECK_FIXTURE)  # one shared stash would fail this
    with pytest.raises(AssertionError, match="client order changed entry"):
        check_aggregate_order_invariant(FirstWins(), fixture=CHECK_FIXTURE)


@attrs.frozen(eq=False, kw_only=True)
class HeadShare:
    """A split that uploads only the last layer (a submodel share: the rest stays on the server)."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, state, ctx):
        module = fedcore.builtin.working_copy(model)
        names = tuple(module.state_dict())
        return Share(module=module, download=names, upload=tuple(n for n in names if n.startswith(names[-1][:2])))


@attrs.frozen(eq=False, kw_only=True)
class FullState:
    """Returns the whole model: the uploaded entries averaged, the rest as the model holds them (or moved)."""

    move_the_rest: bool = False

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        mean = FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx).state
        rest = {k: v + 1.0 if self.move_the_rest else v.clone() for k, v in model.state_dict().items()
                if k not in mean and v.is_floating_point()}
        assert rest, "the fixture's share must leave entries on the server"
        return AggregateResult(state={**rest, **mean})


def test_aggregate_checks_feed_what_the_share_uploads_and_the_rest_stays_put():
    """The synthetic updates carry the fixture's uploads only (what a real aggregator of that pipeline receives);
    aggregating identical updates must leave every entry nobody uploaded as the model holds it."""
    fixture = attrs.evolve(CHECK_FIXTURE, companions=(HeadShare(),))
    check_aggregate_identity(FullState(), fixture=fixture)
    with pytest.raises(AssertionError, match="aggregating identical updates changed entry 0.weight"):
        check_aggregate_identity(FullState(move_the_rest=True), fixture=fixture)


@attrs.frozen(eq=False, kw_only=True)
class Selector:
    """A selector with a deliberate fault: ``fault`` is none, duplicates, empty or mutates."""

    fault: str = "none"

    @fedcore.hookimpl
    def fedcore_select_data(self, client, indices, dataset, share, state, ctx):
        picked = list(indices)[: max(1, len(indices) // 2)]
        if self.fault == "duplicates":
            return picked + picked[:2]
        if self.fault == "empty":
            return []
        x = torch.stack([dataset[i][0] for i in picked])
        if self.fault == "mutates":  # scores samples in train mode: BatchNorm running statistics move
            share.module.train()
            share.module(x)
            return picked
        was_training = share.module.training  # the correct way: eval mode, no grad, mode restored
        share.module.eval()
        with torch.no_grad():
            share.module(x)
        share.module.train(was_training)
        return picked


@pytest.mark.parametrize("fault, message", [
    ("duplicates", "the selection holds indices more than once"),
    ("empty", "the selector chose no samples"),
    ("mutates", "selecting data modified share.module"),
])
def test_select_check_catches_duplicates_empty_and_mutation(fault, message):
    check_select(Selector(), fixture=CHECK_FIXTURE)
    with pytest.raises(AssertionError, match=message):
        check_select(Selector(fault=fault), fixture=CHECK_FIXTURE)


Pair = namedtuple("Pair", "a b")
STATE = StashKey[object]("test.state")


@attrs.frozen(eq=False, kw_only=True)
class Stashes:
    """Stashes a value of kind ``kind`` in the run, server and client stashes every round."""

    kind: str = "plain"

    def value(self, r):
        return {"plain": lambda: {"round": r, "history": [r, float(r) / 3], "w": torch.full((2,), float(r)),
                                  "arr": np.arange(3, dtype=np.int16), "pair": (r, "x"), 3: "int key"},
                "namedtuple": lambda: Pair(r, r + 1),
                "numpy-scalar": lambda: {"loss": np.float32(r) / 3},
                "defaultdict": lambda: defaultdict(list, {"seen": [r]})}[self.kind]()

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx, record):
        ctx.run.stash[STATE] = self.value(ctx.round)
        ctx.server.stash[STATE] = self.value(ctx.round)
        ctx.run.client_states[0].stash[STATE] = self.value(ctx.round)


@pytest.mark.parametrize("kind, message", [
    ("namedtuple", r"test_contract_checks_catch\.Pair comes back from a checkpoint as a tuple"),
    ("numpy-scalar", r"a numpy\.float\d+ comes back from a checkpoint as a float"),
    ("defaultdict", "a defaultdict comes back from a checkpoint as a plain dict"),
])
def test_stash_check_catches_values_the_codec_changes(kind, message):
    check_stash_survives_checkpoint(Stashes(), fixture=CHECK_FIXTURE)
    with pytest.raises(AssertionError, match=message):
        check_stash_survives_checkpoint(Stashes(kind=kind), fixture=CHECK_FIXTURE)


COUNT = StashKey[int]("test.count")


@attrs.frozen(eq=False, kw_only=True)
class RoundCounter:
    """Counts rounds and reports the count; ``on_self=True`` keeps the count on the component (a bug)."""

    on_self: bool = False
    memory: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx):
        if self.on_self:
            self.memory["n"] = self.memory.get("n", 0) + 1
            return {"count": float(self.memory["n"])}
        ctx.run.stash[COUNT] = ctx.run.stash.get(COUNT, 0) + 1
        return {"count": float(ctx.run.stash[COUNT])}


def test_resume_check_catches_state_kept_on_the_component():
    check_resume_equals_uninterrupted(RoundCounter(), fixture=CHECK_FIXTURE)
    with pytest.raises(AssertionError, match="the resumed run's history differs from the uninterrupted run's"):
        check_resume_equals_uninterrupted(RoundCounter(on_self=True), fixture=CHECK_FIXTURE)


def test_every_component_gets_the_run_checks_and_the_check_fixture_has_batchnorm():
    names = [c.__name__ for c in checks_for(RoundCounter())]
    assert names[-2:] == ["check_stash_survives_checkpoint", "check_resume_equals_uninterrupted"]
    model = CHECK_FIXTURE.model_factory()
    assert isinstance(model[0], torch.nn.BatchNorm2d) and "0.running_var" in model.state_dict()


def test_known_failures_must_name_registered_components_and_checks_they_run():
    from fedcore.errors import ConfigError
    from fedcore.testing import parametrize_registered

    with pytest.raises(ConfigError, match=r"not registered: \['no-such-component'\]"):
        parametrize_registered(known_failures={"no-such-component": {"check_select": "reason"}})
    with pytest.raises(ConfigError, match=r"expected failure\(s\) \['check_select'\] name no check it runs"):
        parametrize_registered(known_failures={"fedavg": {"check_select": "fedavg selects nothing"}})
