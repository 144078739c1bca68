"""One ``test_hook_<name>`` per hook: what the engine passes in, when, and what it does with the answer.

``test_hooks_meta.py`` checks that every hookspec is named in some ``test_hook_*`` function here.
"""
from __future__ import annotations

import copy

import attrs
import pluggy
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate, UniformSync
from fedcore.errors import PluginConflictError
from fedcore.models import tiny_mlp
from fedcore.registry import ComponentRegistry
from fedcore.scheduling import Scheduler
from fedcore.testing import HookRecorder, run_tiny_pipeline, tiny_data, tiny_model
from fedcore.types import AggregateResult, Partition, Share


def _run(components, **kwargs):
    pipe = fedcore.Pipeline(components)
    rec = HookRecorder(pipe)
    train, test = tiny_data()
    args = dict(model=tiny_model(), train=train, test=test, num_clients=3, rounds=2, seed=0)
    args.update(kwargs)
    return pipe.run(**args), rec


# -- registration ------------------------------------------------------------------------------

def test_hook_fedcore_register_components():
    info = {p.name: p for p in fedcore.list_plugins()}
    assert info["builtin"].ok and {"fedavg", "sgd", "dirichlet", "dataset:digits", "model:micro-cnn"} <= set(
        info["builtin"].components)
    assert fedcore.get("fedavg") is FedAvg

    class MyPlugin:  # stands in for a plugin's registration module
        @fedcore.hookimpl
        def fedcore_register_components(self, registry):
            registry.add("my-agg", FedAvg, help="an alias")
            registry.add_model("my-mlp", tiny_mlp)

    registry = ComponentRegistry()
    pm = pluggy.PluginManager("fedcore")
    pm.add_hookspecs(fedcore.hookspecs)
    pm.register(MyPlugin())
    pm.hook.fedcore_register_components(registry=registry)
    assert registry.get("my-agg").obj is FedAvg and registry.get("my-agg").slots == ["aggregate"]
    assert registry.get("my-mlp", kind="model").obj is tiny_mlp
    with pytest.raises(PluginConflictError, match="component name 'my-agg' is registered by both"):
        registry.add("my-agg", SGDUpdate)
    with pytest.raises(ValueError, match="must be lower-case"):
        registry.add("MyAgg", FedAvg)
    with pytest.raises(TypeError, match=r"takes a class, got FedAvg\(weighting='samples'\)"):
        registry.add("inst", FedAvg())


class CountSpecs:
    """A plugin-defined hook, added through fedcore_addhooks."""

    @pluggy.HookspecMarker("fedcore")
    def fedcore_count_event(self, value):
        """Experimental hook owned by a plugin."""


@attrs.frozen(eq=False, kw_only=True)
class AddsHooks:
    """Defines a new hook for other components to implement."""

    @fedcore.hookimpl
    def fedcore_addhooks(self, pluginmanager):
        pluginmanager.add_hookspecs(CountSpecs)


@attrs.frozen(eq=False, kw_only=True)
class ImplementsNewHook:
    """Implements the plugin-defined hook."""

    @fedcore.hookimpl
    def fedcore_count_event(self, value):
        return value + 1


@pytest.mark.parametrize("order", ["spec-first", "impl-first"])
def test_hook_fedcore_addhooks(order):
    comps = [AddsHooks(), ImplementsNewHook()]
    pipe = fedcore.Pipeline(comps if order == "spec-first" else comps[::-1])  # no "unknown hook" either way
    assert pipe.plugin_manager.hook.fedcore_count_event(value=41) == [42]
    with pytest.raises(fedcore.ConfigError, match="unknown hook name"):
        fedcore.Pipeline([ImplementsNewHook()])  # without the spec the typo check still fires


# -- slots -------------------------------------------------------------------------------------

@attrs.frozen(eq=False, kw_only=True)
class EvenOdd:
    """Client 0 holds the even samples, client 1 the odd ones; personal test split: the first half of the test set."""

    @fedcore.hookimpl
    def fedcore_partition(self, dataset, num_clients, test_dataset, run):
        assert num_clients == 2 and run.partition is None  # called once, before anything else
        half = len(test_dataset) // 2
        return Partition(train=[range(0, len(dataset), 2), range(1, len(dataset), 2)],
                         test=[range(half), range(half)])


def test_hook_fedcore_partition():
    result, rec = _run([EvenOdd()], num_clients=2)
    assert len(rec.getcalls("fedcore_partition")) == 1
    part = result.run.partition
    assert part.train[0] == tuple(range(0, 96, 2)) and part.test[1] == tuple(range(24))
    assert [c.num_samples for c in result.run.clients] == [48, 48]
    assert result.history[0]["num_examples"] == 96


@attrs.frozen(eq=False, kw_only=True)
class OnlyFirstTwo:
    """A policy factory: always dispatch clients 0 and 1, aggregate when both are back."""

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients, run):
        class Policy:
            def dispatch(self, *, round, now, idle, busy, rng):
                return [c for c in idle if c < 2]

            def ready(self, *, now, arrived, busy, since):
                return not busy

            def accepts(self, update, *, version):
                return False

        assert [c.id for c in clients] == [0, 1, 2]
        return Policy()


def test_hook_fedcore_make_scheduler():
    result, rec = _run([OnlyFirstTwo()])
    assert len(rec.getcalls("fedcore_make_scheduler")) == 1
    assert all(r["clients"] == [0, 1] for r in result.history)
    assert result.run.client_states[2].rounds_participated == 0
    assert isinstance(UniformSync().fedcore_make_scheduler(clients=result.run.clients, run=result.run), Scheduler)


@attrs.frozen(eq=False, kw_only=True)
class HeadOnly:
    """Clients receive the whole model once but only the head (``3.*``) crosses the network and trains afterwards."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model, client, state, ctx):
        module = copy.deepcopy(model)
        for name, p in module.named_parameters():
            p.requires_grad_(name.startswith("3."))
        head = ("3.weight", "3.bias")
        return Share(module=module, download=head, upload=head, meta={"part": "head"})


def test_hook_fedcore_split_model():
    model = tiny_model()
    body = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("1.")}
    result, rec = _run([HeadOnly()], model=model)
    calls = rec.getcalls("fedcore_split_model")
    assert [(c["client"].id, c["ctx"].round) for c in calls] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    head_bytes = (4 * 32 + 4) * 4
    assert all(r["bytes_down"] == 3 * head_bytes and r["bytes_up"] == 3 * head_bytes for r in result.history)
    final = result.model.state_dict()
    assert all(torch.equal(final[k], v) for k, v in body.items())  # the frozen body never moved
    assert not torch.equal(final["3.bias"], tiny_model().state_dict()["3.bias"])


@attrs.frozen(eq=False, kw_only=True)
class FirstFive:
    """Train on the first five samples of the pool only."""

    @fedcore.hookimpl
    def fedcore_select_data(self, client, indices, dataset, share, state, ctx):
        assert ctx.client_id == client.id and share.module is not None
        return tuple(indices)[:5]


def test_hook_fedcore_select_data():
    result, rec = _run([FirstFive()])
    assert all(r["num_examples"] == 15 for r in result.history)
    calls = rec.getcalls("fedcore_select_data")
    assert len(calls) == 6 and calls[0]["indices"] == result.run.partition.train[0]


@attrs.frozen(eq=False, kw_only=True)
class ConstantUpdate:
    """Every client uploads ``client_id + 1`` everywhere with weight ``client_id + 1``."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        tensors = {k: torch.full_like(v, float(client.id + 1)) for k, v in share.module.state_dict().items()
                   if k in share.upload}
        return fedcore.ClientUpdate(client_id=client.id, tensors=tensors, num_examples=client.id + 1)


def test_hook_fedcore_local_update():
    result, rec = _run([ConstantUpdate()], rounds=1)
    # FedAvg weights by num_examples: (1*1 + 2*2 + 3*3) / 6
    for v in result.model.state_dict().values():
        assert torch.allclose(v, torch.full_like(v, 14 / 6))
    calls = rec.getcalls("fedcore_local_update")
    assert [c["data"].indices == result.run.partition.train[c["client"].id] for c in calls] == [True] * 3
    assert all(c["ctx"].channel is not None for c in calls)


@attrs.frozen(eq=False, kw_only=True)
class ScaleAggregate:
    """A wrapper around the aggregate slot: shrinks the result towards zero and reports a metric."""

    factor: float = 0.5

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, model, updates, ctx):
        result = yield
        return AggregateResult(state={k: v * self.factor if v.is_floating_point() else v
                                      for k, v in result.state.items()},
                               per_client=result.per_client, metrics={**result.metrics, "scaled": self.factor})


def test_hook_fedcore_aggregate():
    result, rec = _run([ConstantUpdate(), ScaleAggregate()], rounds=1)
    for v in result.model.state_dict().values():
        assert torch.allclose(v, torch.full_like(v, 0.5 * 14 / 6))
    call = rec.getcalls("fedcore_aggregate")[0]
    assert [u.client_id for u in call["updates"]] == [0, 1, 2] and all(u.staleness == 0 for u in call["updates"])
    assert result.history[0]["agg_scaled"] == 0.5


@attrs.frozen(eq=False, kw_only=True)
class PersonalEval:
    """Personalised evaluation: each client's share of the personal test split, averaged."""

    @fedcore.hookimpl
    def fedcore_evaluate(self, model, dataset, clients, states, ctx):
        from fedcore.builtin import accuracy_and_loss

        test = ctx.run.partition.test
        accs = [accuracy_and_loss(model, dataset, test[c.id])[0] for c in clients]
        return {"personal_accuracy": sum(accs) / len(accs), "clients_evaluated": len(states)}


def test_hook_fedcore_evaluate():
    result, rec = _run([EvenOdd(), PersonalEval()], num_clients=2, rounds=3, eval_every=3)
    assert len(rec.getcalls("fedcore_evaluate")) == 1
    assert "personal_accuracy" not in result.history[0] and result.history[2]["clients_evaluated"] == 2.0
    assert 0.0 <= result.history.last("personal_accuracy") <= 1.0


# -- observers ---------------------------------------------------------------------------------

@attrs.frozen(eq=False, kw_only=True)
class Watcher:
    """Records every observer event."""

    log: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_run_start(self, run):
        self.log.append(("run_start", run.server.version, run.partition is not None, len(run.clients)))

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx):
        self.log.append(("round_start", ctx.round))

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.log.append(("client_done", ctx.round, client.id, update.client_id))

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx):
        return {"watched_round": ctx.round}

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx, record):
        self.log.append(("round_end", ctx.round, record["round"], "test_accuracy" in record))

    @fedcore.hookimpl
    def fedcore_run_end(self, run, history):
        self.log.append(("run_end", len(history), run.server.version))


def test_hook_fedcore_check_pipeline():
    """A component refuses a combination when the pipeline is built; nothing runs, one line says why."""
    from fedcore.scheduling import is_asynchronous

    seen = []

    @attrs.frozen(eq=False, kw_only=True)
    class SyncOnly:
        @fedcore.hookimpl
        def fedcore_check_pipeline(self, pipeline):
            seen.append(type(pipeline.provider("schedule")).__name__)
            if is_asynchronous(pipeline.provider("schedule")):
                raise fedcore.ConfigError("SyncOnly needs a synchronous schedule")

    fedcore.Pipeline([SyncOnly()])
    assert seen == ["UniformSync"]
    for schedule in ("async", "buffered", "semi-async"):
        with pytest.raises(fedcore.ConfigError, match="needs a synchronous schedule"):
            fedcore.Pipeline([SyncOnly(), fedcore.get(schedule)()])
    assert not is_asynchronous(UniformSync())


def test_hook_fedcore_run_start():
    w = Watcher()
    _run([w])
    assert w.log[0] == ("run_start", 0, True, 3)


def test_hook_fedcore_round_start():
    """An observer may replace the server model at round start; every share then follows it."""

    @attrs.frozen(eq=False, kw_only=True)
    class Shrink:
        """At round 1, swap the global model for a narrower one (a stage switch)."""

        @fedcore.hookimpl
        def fedcore_round_start(self, ctx):
            if ctx.round == 1:
                ctx.server.model = tiny_mlp(num_classes=4, hidden=8)

    w = Watcher()
    result, _ = _run([Shrink(), w])
    assert [e for e in w.log if e[0] == "round_start"] == [("round_start", 0), ("round_start", 1)]
    wide = sum(v.numel() * 4 for v in tiny_model().state_dict().values())
    narrow = sum(v.numel() * 4 for v in tiny_mlp(num_classes=4, hidden=8).state_dict().values())
    assert result.history[0]["bytes_down"] == 3 * wide and result.history[1]["bytes_down"] == 3 * narrow
    assert result.model.state_dict()["1.weight"].shape == (8, 64)


@attrs.frozen(eq=False, kw_only=True)
class Trained:
    """Logs each local update as it runs and each ``client_trained`` event; client 1 fails in round 0."""

    log: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        self.log.append(("local_update", ctx.round, client.id))
        if ctx.round == 0 and client.id == 1:
            raise RuntimeError("client 1 is out of battery")
        return SGDUpdate(lr=0.1).fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)

    @fedcore.hookimpl
    def fedcore_client_trained(self, client, outcome, ctx):
        self.log.append(("client_trained", ctx.round, client.id, type(outcome).__name__, outcome.client_id,
                         ctx.client_id))

    @fedcore.hookimpl
    def fedcore_client_done(self, client, ctx):
        self.log.append(("client_done", ctx.round, client.id))


@attrs.frozen(eq=False, kw_only=True)
class Silent:
    """A cohort that trains the whole wave, then answers, and never calls ``job.trained``."""

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs, ctx):
        return [attrs.evolve(job.local_update(job.select_data()), client_id=job.client.id) for job in jobs]


def test_hook_fedcore_client_trained():
    """Every job is reported once where it trained, with its outcome before upload (a failure too): by the per-job
    cohort as each client finishes, and by the engine, when the cohort returns, for a cohort that says nothing."""
    live = Trained()
    _run([live])
    r0 = [e for e in live.log if e[1] == 0]
    assert r0[:6] == [("local_update", 0, 0), ("client_trained", 0, 0, "ClientUpdate", 0, 0),
                      ("local_update", 0, 1), ("client_trained", 0, 1, "ClientFailed", 1, 1),
                      ("local_update", 0, 2), ("client_trained", 0, 2, "ClientUpdate", 2, 2)]
    assert r0[6:] == [("client_done", 0, 0), ("client_done", 0, 2)]  # then the arrivals; the failure never arrives
    silent = Trained()
    _run([silent, Silent()])
    assert [e for e in silent.log if e[1] == 1] == [
        ("local_update", 1, 0), ("local_update", 1, 1), ("local_update", 1, 2),
        ("client_trained", 1, 0, "ClientUpdate", 0, 0), ("client_trained", 1, 1, "ClientUpdate", 1, 1),
        ("client_trained", 1, 2, "ClientUpdate", 2, 2),
        ("client_done", 1, 0), ("client_done", 1, 1), ("client_done", 1, 2)]


def test_hook_fedcore_client_done():
    w = Watcher()
    _run([w])
    done = [e for e in w.log if e[0] == "client_done"]
    assert done == [("client_done", r, c, c) for r in (0, 1) for c in (0, 1, 2)]
    # every arrival is reported before that round's round_end
    assert w.log.index(("client_done", 0, 2, 2)) < w.log.index(("round_end", 0, 0, True))


def test_hook_fedcore_collect_metrics():
    @attrs.frozen(eq=False, kw_only=True)
    class Other:
        """Contributes a second metric, and optionally a clashing one."""

        clash: bool = False

        @fedcore.hookimpl
        def fedcore_collect_metrics(self, ctx):
            return {"other": 1.5, **({"watched_round": 9} if self.clash else {})}

    result, _ = _run([Watcher(), Other()])
    assert [(r["watched_round"], r["other"]) for r in result.history] == [(0.0, 1.5), (1.0, 1.5)]
    with pytest.raises(ValueError, match=r"metric 'watched_round' is contributed by both 0:Watcher and 1:Other"):
        _run([Watcher(), Other(clash=True)])


def test_hook_fedcore_round_end():
    w = Watcher()
    rows = []
    result, _ = _run([w], on_round=rows.append)
    assert [e for e in w.log if e[0] == "round_end"] == [("round_end", 0, 0, True), ("round_end", 1, 1, True)]
    assert rows == result.history.rows


def test_hook_fedcore_run_end():
    w = Watcher()
    _run([w], rounds=3)
    assert w.log[-1] == ("run_end", 3, 3)


def test_observers_do_not_need_every_argument():
    # pluggy passes only the arguments an implementation asks for
    @attrs.frozen(eq=False, kw_only=True)
    class Minimal:
        """Asks for nothing."""

        seen: list = attrs.field(factory=list)

        @fedcore.hookimpl
        def fedcore_round_end(self):
            self.seen.append(1)

    m = Minimal()
    run_tiny_pipeline([m], rounds=2)
    assert m.seen == [1, 1]


def test_hook_fedcore_adapt_update():
    """Under async, a stale update made for a model that has since shrunk: the first adapter's answer is used;
    without one the engine drops it with a reason in the row (never a crash in the aggregator)."""
    from fedcore.runtime import DeviceProfile, SimClock

    fast = DeviceProfile(name="fast", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=2**30)
    clock = dict(clock=SimClock({"fast": fast, "slow": fast.scaled(speed=0.05, bandwidth=0.05, name="slow")}),
                 profiles=["fast", "fast", "slow"], rounds=4)

    @attrs.frozen(eq=False, kw_only=True)
    class Shrink:
        @fedcore.hookimpl
        def fedcore_round_start(self, ctx):
            if ctx.round == 1:
                ctx.server.model = tiny_mlp(num_classes=4, hidden=8)

    @attrs.frozen(eq=False, kw_only=True)
    class Adapter:
        answer: str

        @fedcore.hookimpl
        def fedcore_adapt_update(self, update, model, ctx):
            assert update.staleness == ctx.server.version - update.version > 0
            if self.answer == "drop":
                return fedcore.DropUpdate(reason="made for the wide model")
            own = model.state_dict()
            return attrs.evolve(update, tensors={k: v[tuple(slice(0, n) for n in own[k].shape)]
                                                 for k, v in update.tensors.items()}, base={})

    def stale_events(adapter):
        result, _ = _run([Shrink(), fedcore.get("async")(), *adapter], **clock)
        rows = result.history.rows
        return [e for r in rows for e in r.get("share_changed", [])], sum(r.get("max_staleness", 0) for r in rows)

    default, _ = stale_events([])
    assert default and all("no longer fits" in e["reason"] and "has shape" in e["reason"] for e in default)
    dropped, _ = stale_events([Adapter(answer="drop")])
    assert dropped and {e["reason"] for e in dropped} == {"made for the wide model"}
    adapted, stale_used = stale_events([Adapter(answer="slice")])
    assert adapted == [] and stale_used > 0  # sliced stale updates were aggregated
