"""Pipeline composition: order, slot validation, replace, describe, from_config and its errors."""
from __future__ import annotations

import re

import attrs
import pluggy
import pytest
import torch

import fedcore
from fedcore.builtin import DirichletPartition, FedAvg, GlobalEval, IIDPartition, SGDUpdate, UniformSync, WholeModel
from fedcore.errors import ConfigError, SlotConflictError, UnknownComponentError
from fedcore.hookspecs import SLOT_HOOKS
from fedcore.testing import run_tiny_pipeline


@attrs.frozen(eq=False, kw_only=True)
class AggWrap:
    """Records when it enters and leaves the aggregate slot."""

    tag: str
    log: list = attrs.field(factory=list)

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, updates):
        self.log.append(("enter", self.tag))
        result = yield
        self.log.append(("exit", self.tag))
        return result


@attrs.frozen(eq=False, kw_only=True)
class RoundEndObserver:
    """Records the order observers are called in."""

    tag: str
    log: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_round_end(self, record):
        self.log.append(self.tag)


@attrs.frozen(eq=False, kw_only=True)
class OtherAggregator:
    """A second aggregate provider, to clash with FedAvg."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, updates):
        return fedcore.AggregateResult(state={})


def test_list_order_is_wrapper_and_observer_call_order():
    log: list = []
    a, b = AggWrap(tag="a", log=log), AggWrap(tag="b", log=log)
    o1, o2, o3 = (RoundEndObserver(tag=t, log=log) for t in ("o1", "o2", "o3"))
    run_tiny_pipeline([a, o1, b, o2, o3], rounds=1)
    # the first listed wrapper is the outermost; observers run in list order (pluggy alone would run them LIFO)
    assert log == [("enter", "a"), ("enter", "b"), ("exit", "b"), ("exit", "a"), "o1", "o2", "o3"]


def test_a_wrapper_alone_wraps_the_default_provider():
    log: list = []
    pipe = fedcore.Pipeline([AggWrap(tag="only", log=log)])
    assert isinstance(pipe.provider("aggregate"), FedAvg)
    run_tiny_pipeline(list(pipe.components[:1]), rounds=1)
    assert log == [("enter", "only"), ("exit", "only")]


def test_two_providers_name_both():
    with pytest.raises(SlotConflictError, match=r"slot 'aggregate' is provided by more than one component: "
                                                rf"fedavg \(fedcore {re.escape(fedcore.__version__)}\), "
                                                r"OtherAggregator"):
        fedcore.Pipeline([FedAvg(), OtherAggregator()])


def test_class_instead_of_instance():
    with pytest.raises(TypeError, match=r"got the class FedAvg. Have you forgotten the `\(\)`\? Use FedAvg\(\)"):
        fedcore.Pipeline([FedAvg])


def test_same_object_twice():
    agg = FedAvg()
    with pytest.raises(ConfigError, match="listed twice"):
        fedcore.Pipeline([agg, agg])


def test_hook_name_typo_is_caught_by_check_pending():
    @attrs.frozen(eq=False, kw_only=True)
    class Typo:
        """Misspells fedcore_aggregate."""

        @fedcore.hookimpl
        def fedcore_agregate(self, updates):
            return None

    with pytest.raises(ConfigError, match=r"(?s)unknown hook name \(a typo\?\).*fedcore_agregate"):
        fedcore.Pipeline([Typo()])


def test_argument_not_in_the_spec_is_rejected():
    @attrs.frozen(eq=False, kw_only=True)
    class ExtraArg:
        """Asks for an argument the spec does not have."""

        @fedcore.hookimpl
        def fedcore_aggregate(self, updates, weights):
            return None

    with pytest.raises(ConfigError, match=r"(?s)ExtraArg does not fit the hook specifications.*weights"):
        fedcore.Pipeline([ExtraArg()])


def test_tryfirst_on_a_provider_is_an_error():
    @attrs.frozen(eq=False, kw_only=True)
    class Pushy:
        """A provider that asks to run first."""

        @fedcore.hookimpl(tryfirst=True)
        def fedcore_aggregate(self, updates):
            return fedcore.AggregateResult(state={})

    with pytest.raises(ConfigError, match=r"provides slot 'aggregate' with tryfirst/trylast"):
        fedcore.Pipeline([Pushy()])


def test_tryfirst_on_a_wrapper_is_allowed_and_moves_it_outermost():
    log: list = []

    @attrs.frozen(eq=False, kw_only=True)
    class First(AggWrap):
        """A wrapper that insists on being outermost."""

        @fedcore.hookimpl(wrapper=True, tryfirst=True)
        def fedcore_aggregate(self, updates):
            self.log.append(("enter", self.tag))
            result = yield
            self.log.append(("exit", self.tag))
            return result

    run_tiny_pipeline([AggWrap(tag="a", log=log), First(tag="first", log=log)], rounds=1)
    assert log[:2] == [("enter", "first"), ("enter", "a")]


def test_old_style_hookwrapper_is_an_error():
    @attrs.frozen(eq=False, kw_only=True)
    class Old:
        """pluggy's old hookwrapper style."""

        @fedcore.hookimpl(hookwrapper=True)
        def fedcore_aggregate(self, updates):
            yield

    with pytest.raises(ConfigError,
                       match=r"old-style hookwrapper on fedcore_aggregate; use @fedcore.hookimpl\(wrapper=True\)"):
        fedcore.Pipeline([Old()])


def test_defaults_fill_empty_slots_and_can_be_turned_off():
    pipe = fedcore.Pipeline([SGDUpdate(lr=0.1)])
    assert {s: type(pipe.provider(s)).__name__ for s in SLOT_HOOKS} == {
        "partition": "IIDPartition", "schedule": "UniformSync", "split": "WholeModel", "select": "AllData",
        "local_update": "SGDUpdate", "cohort": "PerJobCohort", "aggregate": "FedAvg", "evaluate": "GlobalEval"}
    assert pipe.provider("local_update").lr == 0.1
    with pytest.raises(fedcore.MissingSlotError, match=r"slot 'partition' \(fedcore_partition\) has no provider"):
        fedcore.Pipeline([SGDUpdate()], defaults=False)
    with pytest.raises(ConfigError, match="unknown slot 'agg'; choose one of: partition, schedule"):
        pipe.provider("agg")


def test_replace_swaps_one_slot_and_leaves_the_original():
    sgd, agg = SGDUpdate(lr=0.1), FedAvg()
    pipe = fedcore.Pipeline([DirichletPartition(alpha=1.0), sgd, agg])
    new_agg = FedAvg(weighting="uniform")
    swapped = pipe.replace(aggregate=new_agg, evaluate=GlobalEval(batch_size=7))
    assert swapped.provider("aggregate") is new_agg and swapped.provider("local_update") is sgd
    assert swapped.provider("evaluate").batch_size == 7  # a default slot gets an explicit provider
    assert pipe.provider("aggregate") is agg and pipe.provider("evaluate").batch_size == 128
    with pytest.raises(ConfigError, match=r"replace\(aggregate=...\): SGDUpdate does not provide 'aggregate'"):
        pipe.replace(aggregate=SGDUpdate())


def test_describe_manifest():
    pipe = fedcore.Pipeline([DirichletPartition(alpha=0.3, min_size=4), SGDUpdate(lr=0.2, epochs=2), AggWrap(tag="w")])
    m = pipe.describe()
    assert m["fedcore_version"] == fedcore.__version__
    assert m["slots"] == {"partition": "dirichlet", "schedule": "uniform", "split": "whole-model", "select": "all-data",
                          "local_update": "sgd", "cohort": "per-job", "aggregate": "fedavg", "evaluate": "global-eval"}
    rows = {r["class"].rsplit(".", 1)[-1]: r for r in m["components"]}
    d = rows["DirichletPartition"]
    assert d["name"] == "dirichlet" and d["provides"] == ["partition"] and not d["default"]
    assert d["settings"] == {"alpha": 0.3, "min_size": 4, "max_tries": 1000}
    assert d["distribution"] == "fedcore" and d["version"] == fedcore.__version__
    assert rows["SGDUpdate"]["settings"]["epochs"] == 2
    assert rows["FedAvg"]["default"] and rows["FedAvg"]["settings"] == {"weighting": "samples"}
    w = next(r for r in m["components"] if r["class"].endswith("AggWrap"))
    assert w["name"] is None and w["wraps"] == ["aggregate"] and w["provides"] == []
    import json
    json.dumps(m)  # a manifest is plain JSON


def test_from_config_builds_named_components_with_settings():
    pipe = fedcore.Pipeline.from_config({
        "partition": {"name": "dirichlet", "alpha": 2, "min_size": 3},   # an int where a float is expected converts
        "local_update": {"name": "sgd", "lr": 0.1, "optimizer": "adam"},
        "aggregate": "fedavg",
        "plugins": [{"name": "global-eval", "batch_size": 64}],
    })
    assert pipe.provider("partition").alpha == 2.0 and isinstance(pipe.provider("partition").alpha, float)
    assert pipe.provider("local_update").optimizer == "adam"
    assert pipe.provider("evaluate").batch_size == 64
    assert pipe.describe()["slots"]["aggregate"] == "fedavg"


def test_from_config_unknown_component_lists_the_choices_of_that_slot_only():
    with pytest.raises(UnknownComponentError) as err:
        fedcore.Pipeline.from_config({"aggregate": "fedavgg"})
    msg = str(err.value)
    assert re.match(r"unknown component 'fedavgg' for slot 'aggregate' \(did you mean fedavg[,?].*; choose one of: ",
                    msg)
    choices, _, note = msg.split("; choose one of: ")[1].partition(" (installed plugins providing 'aggregate': ")
    assert {"fedavg", "fedasync", "fedbuff"} <= set(choices.split(", "))
    assert not ({"all-data", "dirichlet", "global-eval", "iid", "sgd", "uniform", "whole-model"}
                & set(choices.split(", ")))
    assert "builtin (fedcore " in note  # which installed plugins provide the slot
    with pytest.raises(UnknownComponentError) as err:  # a plugin table is not a slot: every component is a choice
        fedcore.Pipeline.from_config({"plugins": ["fedavgg"]})
    assert "for slot" not in str(err.value) and "sgd" in str(err.value)


def test_from_config_unknown_key_and_bad_tables():
    with pytest.raises(ConfigError, match=r"unknown pipeline key\(s\) \['aggregator'\]; allowed: partition, schedule, "
                                          r"split, select, local_update, cohort, aggregate, evaluate, plugins"):
        fedcore.Pipeline.from_config({"aggregator": "fedavg"})
    with pytest.raises(ConfigError, match=r"aggregate: a component table needs a 'name' key, got keys \['weighting'\]"):
        fedcore.Pipeline.from_config({"aggregate": {"weighting": "uniform"}})
    with pytest.raises(ConfigError, match=r"local_update = FedAvg does not provide the 'local_update' slot "
                                          r"\(it provides: aggregate\)"):
        fedcore.Pipeline.from_config({"local_update": "fedavg"})
    with pytest.raises(ConfigError, match="pipeline config must be a table/dict, got list"):
        fedcore.Pipeline.from_config(["fedavg"])
    with pytest.raises(ConfigError, match=r"local_update.sgd: unknown setting\(s\) \['learning_rate'\]; allowed: lr, "
                                          r"epochs, batch_size"):
        fedcore.Pipeline.from_config({"local_update": {"name": "sgd", "learning_rate": 0.1}})


@pytest.mark.parametrize(("settings", "message"), [
    ({"lr": "fast"}, r"local_update.sgd: SGDUpdate.lr='fast' has type str; expected float"),
    ({"lr": 0.0}, r"SGDUpdate.lr=0.0 is out of range; must be > 0.0"),
    ({"epochs": 0}, r"SGDUpdate.epochs=0 is out of range; must be >= 1"),
    ({"epochs": 1.5}, r"SGDUpdate.epochs=1.5 has type float; expected int"),
    ({"epochs": True}, r"SGDUpdate.epochs=True has type bool; expected int"),
    ({"momentum": 1.0}, r"SGDUpdate.momentum=1.0 is out of range; must be < 1.0"),
    ({"optimizer": "rmsprop"}, r"SGDUpdate.optimizer='rmsprop' is not allowed; choose one of: 'sgd', 'adam'"),
])
def test_from_config_wrong_setting_type_or_range_names_the_field(settings, message):
    with pytest.raises(ConfigError, match=message):
        fedcore.Pipeline.from_config({"local_update": {"name": "sgd", **settings}})


def test_pipeline_pickles_by_rebuilding():
    import pickle

    pipe = fedcore.Pipeline([SGDUpdate(lr=0.3), FedAvg()])
    clone = pickle.loads(pickle.dumps(pipe))
    assert clone.provider("local_update").lr == 0.3 and clone.describe()["slots"] == pipe.describe()["slots"]


def test_a_pipeline_runs_exactly_what_it_is_given():
    # installed is not active: an installed plugin's components never join a pipeline on their own
    pipe = fedcore.Pipeline([IIDPartition(), UniformSync(), WholeModel(), SGDUpdate(), FedAvg()])
    classes = {type(c).__module__.split(".")[0] for c in pipe.components}
    assert classes == {"fedcore"}
    assert len(pipe.plugin_manager.get_plugins()) == 8  # five given + the default select, cohort and evaluate
    assert torch.is_tensor(run_tiny_pipeline(pipe.components[:5], rounds=1).model.state_dict()["1.weight"])


@attrs.frozen(eq=False, kw_only=True)
class Unmarked:
    """A method with a hook's name but no ``@fedcore.hookimpl``: pluggy ignores it."""

    log: list = attrs.field(factory=list)

    def fedcore_round_end(self, record):
        self.log.append("unmarked")


def test_hook_markers_read_once_a_class_still_follow_a_patched_class(monkeypatch):
    """Pipelines read each component class's hook markers once (a cache): a class attribute patched afterwards
    (here an unmarked method replaced by a marked one), or a hook that an instance carries in its own ``__dict__``,
    is still read afresh by the next pipeline."""
    log: list = []
    run_tiny_pipeline([Unmarked(log=log)], rounds=1)  # no hook; the class's (empty) markers are now cached

    @fedcore.hookimpl
    def patched(self, record):
        self.log.append("patched")

    monkeypatch.setattr(Unmarked, "fedcore_round_end", patched)
    run_tiny_pipeline([Unmarked(log=log)], rounds=1)

    class Plain:
        """No hook on the class; one on the instance."""

    own = Plain()
    own.fedcore_round_end = fedcore.hookimpl(lambda record: log.append("instance"))
    run_tiny_pipeline([own], rounds=1)
    assert log == ["patched", "instance"]


@attrs.frozen(eq=False, kw_only=True)
class RaisingProperty:
    """A component with a property that raises until something else is known (SA-FedLoRA's ``rank_schedule``)."""

    @property
    def not_yet(self):
        raise ValueError("known only once the model is")

    def settle(self):
        """A plain method: pluggy is asked about it (the watch below is not vacuous)."""


def test_a_property_is_never_handed_to_pluggy_whose_older_versions_evaluate_it(monkeypatch):
    """pluggy 1.5 and 1.6 (within fedcore's pin) read each attribute with ``getattr``, so a raising property broke
    ``Pipeline(...)`` on the first GPU machine; 1.7 here reads statically and hides the bug. What pluggy is asked
    about is watched: a property must never be among it."""
    asked: list[str] = []
    own = pluggy.PluginManager.parse_hookimpl_opts

    def watched(self, plugin, name):
        asked.append(name)
        return own(self, plugin, name)

    monkeypatch.setattr(pluggy.PluginManager, "parse_hookimpl_opts", watched)
    monkeypatch.setattr(fedcore.pipeline, "_HOOK_MARKERS", {})  # nothing read by an earlier pipeline of this process
    fedcore.Pipeline([RaisingProperty()])
    assert "settle" in asked and "not_yet" not in asked
