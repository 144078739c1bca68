"""Share.kinds labels non-weight entries in the ledger; Share.meta reaches the aggregator as ClientUpdate.meta."""
from __future__ import annotations

import attrs

import fedcore
from fedcore.builtin import FedAvg, WholeModel
from fedcore.testing import run_tiny_pipeline


@attrs.frozen(eq=False, kw_only=True)
class LabelledShare:
    """The whole model, with the head's bias labelled as 'logits' and a per-client tag in meta."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, state, ctx):
        share = WholeModel().fedcore_split_model(model=model, client=client, state=None, ctx=ctx)
        return attrs.evolve(share, kinds={"3.bias": "logits"}, meta={"tag": client.id * 10})


@attrs.frozen(eq=False, kw_only=True)
class MetaRecordingFedAvg:
    """FedAvg that records the meta of every update it sees in the server stash."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        ctx.server.stash.setdefault(SEEN, []).extend((u.client_id, dict(u.meta)) for u in updates)
        return FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)


SEEN = fedcore.StashKey[list]("test.seen-meta")


def test_share_kinds_split_ledger_and_meta_reaches_aggregator():
    result = run_tiny_pipeline([LabelledShare(), MetaRecordingFedAvg()], rounds=2)
    ledger = result.ledger
    bias_bytes = result.model.state_dict()["3.bias"].numel() * 4
    runs = 2 * 3  # rounds x clients
    assert ledger.total(direction="down", kind="logits") == runs * bias_bytes
    assert ledger.total(direction="up", kind="logits") == runs * bias_bytes
    total_down = sum(v.numel() * v.element_size() for v in result.model.state_dict().values()) * runs
    assert ledger.total(direction="down") == total_down  # relabelling moves bytes between kinds, never adds any
    seen = result.run.server.stash[SEEN]
    assert sorted(seen) == sorted((c, {"tag": c * 10}) for _ in range(2) for c in range(3))
