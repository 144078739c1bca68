"""Split recipes with any aggregator and under every scheduler; late server sessions applied or dropped, and counted."""
from __future__ import annotations

import io

import attrs
import pytest
import torch

import fedcore
from fedcore import ConfigError
from fedcore.experiment.progress import RunProgress
from fedcore.models import micro_vit
from fedcore.runtime import DeviceProfile, SimClock
from fedcore.testing import tiny_data
from fedcore_split import (
    Segment,
    ServerCopies,
    SplitFedV1,
    StaleSession,
    split_layout,
    staleness_weight,
)

FAST = DeviceProfile(name="fast", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=2**30, jitter=0.2)
TABLE = {"fast": FAST, "slow": FAST.scaled(speed=0.5, bandwidth=0.5, name="slow")}
SCHEDULES = {"uniform": "uniform", "async": {"name": "async", "concurrency": 3},
             "buffered": {"name": "buffered", "buffer_size": 2, "concurrency": 4},
             "semi-async": {"name": "semi-async", "mu": 0.5, "t_clk": 0.01}}
WEIGHT_RULES = ("splitfed-v1", "fedv", "fedvz")  # late sessions applied with a staleness weight
DROP_RULES = ("sl", "splitfed-v2")               # sequential server: late steps dropped


def small_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)


def overrides(recipe: str) -> dict:
    if recipe.startswith("fedv"):
        return {"split": {"fedround": 2, "lr_server": 1e-2}, "local_update": {"batch_size": 16, "local_epochs": 1}}
    return {"local_update": {"batch_size": 16}}


@attrs.frozen(eq=False)
class CountStale:
    """Observer: how many updates reaching each aggregation were dispatched in an earlier round."""

    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, updates, ctx):
        self.seen[ctx.round] = sum(1 for u in updates if u.version < ctx.round)
        return (yield)


def run(recipe: str, schedule, rounds: int = 6, **kw):
    counter = CountStale()
    pipe = fedcore.recipe(recipe, schedule=schedule, plugins=[counter], **{**overrides(recipe), **kw})
    train, test = tiny_data(n=60, n_test=24)
    result = pipe.run(model=small_vit(), train=train, test=test, num_clients=5, rounds=rounds, seed=0,
                      clock=SimClock(TABLE), profiles=["fast"] * 3 + ["slow"] * 2)
    return result, counter.seen


@pytest.mark.slow  # every recipe under every scheduler (20 six-round runs): the suite runs it, --quick does not
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("recipe", [*WEIGHT_RULES, *DROP_RULES])
def test_every_split_recipe_runs_under_every_scheduler_and_accounts_for_late_sessions(recipe, schedule):
    result, stale = run(recipe, SCHEDULES[schedule])
    rows = result.history.rows
    assert len(rows) == 6
    assert not any("failed" in r or "rejected" in r for r in rows), [r.get("failed") for r in rows]
    for r in rows:
        late = stale.get(r["round"], 0)
        if late == 0:
            assert "split_stale_applied" not in r and "split_stale_dropped" not in r
            continue
        assert r["split_stale_applied"] + r["split_stale_dropped"] == late, r  # none lost silently
        if recipe in WEIGHT_RULES:
            assert r["split_stale_dropped"] == 0
    if schedule in ("async", "buffered", "semi-async"):
        assert sum(stale.values()) > 0, "the clock must make some sessions late, or this test checks nothing"
        if recipe in DROP_RULES:
            assert sum(r.get("split_stale_dropped", 0) for r in rows) > 0


def test_late_copies_move_the_server_less_than_fresh_ones():
    model = small_vit()
    layout = split_layout(model, "patch_embed", "norm")
    rule = ServerCopies(model, layout["server"], lr=0.1)
    fresh, late = rule.open(0), ServerCopies(model, layout["server"], lr=0.1).open(1)
    names = list(Segment(model, {"server": layout["server"]}).state_dict())
    fresh.staged = {k: torch.zeros(()) for k in names[:1]}
    late.staged = {k: torch.ones(()) for k in names[:1]}
    rule.committed.append(0)
    out = rule.finish([0], {0: 1.0, 1: 1.0}, stale=[StaleSession(session=late, staleness=3)])
    w = staleness_weight(3)
    assert w == pytest.approx(0.5)
    assert float(out[names[0]]) == pytest.approx(w / (1.0 + w))


@pytest.mark.parametrize("aggregator", ["trimmed-mean", "median"])
@pytest.mark.parametrize("recipe", ["fedv", "splitfed-v1"])
def test_robust_aggregators_merge_the_client_segments_of_split_recipes(recipe, aggregator):
    pytest.importorskip("fedcore_robust")
    pipe = fedcore.recipe(recipe, aggregate=aggregator, **overrides(recipe))
    assert fedcore.plugins.registry().find(pipe.provider("aggregate")).name == aggregator
    model = small_vit()
    encoder = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("blocks.")}
    train, test = tiny_data(n=60, n_test=24)
    result = pipe.run(model=model, train=train, test=test, num_clients=5, rounds=3, seed=0)
    rows = result.history.rows
    assert [r["agg_segments_averaged"] for r in rows][0] == 5.0
    assert all(r["agg_server_sessions_used"] == 5.0 for r in rows)
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in encoder.items()), "the server must still train"


def test_a_recipe_name_in_a_slot_points_to_recipe():
    with pytest.raises(ConfigError) as err:
        fedcore.Pipeline.from_config({"split": "fedv"})
    assert str(err.value) == ("unknown component 'fedv' for slot 'split': 'fedv' is a recipe (a preset pipeline of "
                              "components), not a component: write recipe = \"fedv\" in TOML or "
                              "fedcore.recipe(\"fedv\") in Python, and give settings to the slot that owns them "
                              "(fedcore describe fedv)")


@pytest.mark.parametrize("recipe, split", [("fedv", {}), ("splitfed-v2", {"personal": True})])
def test_personal_segments_refuse_fedbuffs_delta_step_when_the_pipeline_is_built(recipe, split):
    with pytest.raises(ConfigError, match=r"keeps client segments personal .* FedBuffStep cannot form their deltas"):
        fedcore.recipe(recipe, aggregate="fedbuff", split=split)
    fedcore.recipe("splitfed-v2", aggregate="fedbuff")  # shared segments: deltas are fine


def test_deprecated_shell_warns_and_runs_like_its_recipe():
    with pytest.warns(DeprecationWarning, match="SplitFedV1 fills several slots and is deprecated"):
        shell = SplitFedV1(batch_size=16)
    train, test = tiny_data(n=48, n_test=24)
    old = fedcore.Pipeline([shell]).run(model=small_vit(), train=train, test=test, num_clients=3, rounds=2)
    new = fedcore.recipe("splitfed-v1", local_update={"batch_size": 16}).run(
        model=small_vit(), train=train, test=test, num_clients=3, rounds=2)
    assert [r["test_loss"] for r in old.history.rows] == [r["test_loss"] for r in new.history.rows]


def test_progress_line_shows_late_sessions():
    out = io.StringIO()
    progress = RunProgress(name="fedv", rounds=4, mode="plain", stream=out)
    progress.round_done({"round": 1, "clients": [0, 2], "split_stale_applied": 2.0, "split_stale_dropped": 1.0})
    progress.round_done({"round": 2, "clients": [0, 2]})
    first, second = out.getvalue().splitlines()
    assert "stale sessions 2 applied 1 dropped" in first
    assert "stale" not in second
