"""The drift methods in whole runs: exact resume under every schedule, control variates booked under their own ledger
kinds, and the combinations they cannot run refused in one line."""
import attrs
import pytest

import fedcore
from fedcore.builtin import AsyncSchedule, SGDUpdate
from fedcore.errors import ConfigError
from fedcore.testing import CHECK_FIXTURE, run_tiny_pipeline
from fedcore.testing.executor import SCHEDULES
from fedcore.testing.resume import check_resume_equals_uninterrupted
from fedcore_drift import (
    FedDynAggregate,
    FedDynUpdate,
    FedNovaAggregate,
    FedNovaUpdate,
    ScaffoldAggregate,
    ScaffoldUpdate,
)

PAIRS = {
    "scaffold-ii": lambda: (ScaffoldAggregate(), ScaffoldUpdate(option="II")),
    "scaffold-i": lambda: (ScaffoldAggregate(), ScaffoldUpdate(option="I")),
    "fednova": lambda: (FedNovaAggregate(), FedNovaUpdate(momentum=0.5)),
    "feddyn": lambda: (FedDynAggregate(alpha=0.1), FedDynUpdate(alpha=0.1)),
}


def schedule(name):
    """The scheduler family's schedule component alone (its own aggregator would fill the slot ours takes)."""
    return SCHEDULES[name]()[0]


RESUMED = [("scaffold-ii", s) for s in SCHEDULES] + [("feddyn", "semi-async"), ("feddyn", "async"),
                                                    ("fednova", "semi-async")]
"""(test_contract.py covers every method on synchronous rounds and SCAFFOLD and FedNova under FedBuff.)"""


@pytest.mark.parametrize(("method", "schedule_name"), RESUMED)
def test_a_killed_run_resumes_to_the_uninterrupted_one(method, schedule_name):
    """Rows and weights of a run stopped after round 0 and resumed equal the straight run's: the server state
    (SCAFFOLD's c, FedDyn's h) and the client state (c_i, FedDyn's gradients) come back from the checkpoint."""
    aggregate, local = PAIRS[method]()
    fixture = attrs.evolve(CHECK_FIXTURE, num_clients=6, companions=[local, schedule(schedule_name)])
    check_resume_equals_uninterrupted(aggregate, fixture=fixture)


def _rows(method):
    aggregate, local = PAIRS[method]()
    result = run_tiny_pipeline([local, aggregate], rounds=3, fixture=CHECK_FIXTURE)
    n_params = sum(p.numel() for p in result.model.parameters() if p.requires_grad)
    return result.ledger.to_rows(), n_params


@pytest.mark.parametrize("method", ["scaffold-ii", "scaffold-i"])
def test_scaffold_books_its_control_variates_under_their_own_kinds(method):
    """Δc_i goes up (one float32 per trainable weight, per client and round) and c comes down from round 1 on (the
    server holds none before the first aggregation), each under its own kind, none as plain ``aux``."""
    rows, n_params = _rows(method)
    kinds = {(r["direction"], r["kind"]) for r in rows}
    assert {("down", "control_variate"), ("up", "control_variate_delta")} <= kinds
    assert not any(r["kind"] == "aux" for r in rows)
    ups = [r for r in rows if r["kind"] == "control_variate_delta"]
    downs = [r for r in rows if r["kind"] == "control_variate"]
    weights_up = [r for r in rows if r["kind"] == "weights" and r["direction"] == "up"]
    assert len(ups) == len(weights_up) and all(r["nbytes"] == 4 * n_params for r in ups)
    assert all(r["nbytes"] == 4 * n_params for r in downs)
    assert min(r["round"] for r in downs) == 1 and {r["round"] for r in downs} == {1, 2}


def test_fednova_sends_one_float_up_and_feddyn_nothing_but_weights():
    """FedNova's ‖a_i‖₁ is one float64 per update (``fednova_norm``); FedDyn's h never leaves the server."""
    rows, _ = _rows("fednova")
    norms = [r for r in rows if r["kind"] == "fednova_norm"]
    assert norms and all(r["direction"] == "up" and r["nbytes"] == 8 for r in norms)
    rows, _ = _rows("feddyn")
    assert {r["kind"] for r in rows} == {"weights"}


def test_fednova_refuses_fedasync_in_one_line():
    with pytest.raises(ConfigError, match="FedAsync aggregates one arrival") as err:
        fedcore.recipe("fednova", schedule="async")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("aggregate", "local", "message"), [
    (ScaffoldAggregate(), SGDUpdate(), "use local_update = \"scaffold-sgd\""),
    (FedNovaAggregate(), SGDUpdate(), "use local_update = \"fednova-sgd\""),
    (FedDynAggregate(), ScaffoldUpdate(), "use local_update = \"feddyn-sgd\""),
    (FedDynAggregate(alpha=0.1), FedDynUpdate(alpha=0.01), "aggregate alpha=0.1 differs from local_update alpha=0.01"),
])
def test_a_server_without_its_client_is_refused_in_one_line(aggregate, local, message):
    with pytest.raises(ConfigError, match=message) as err:
        fedcore.Pipeline([local, aggregate])
    assert "\n" not in str(err.value)


def test_recipes_use_their_components_and_every_schedule_but_fednova_async_builds():
    for name in ("scaffold", "fednova", "feddyn"):
        for sched in ("uniform", "semi-async", "buffered", "async"):
            if (name, sched) == ("fednova", "async"):
                continue
            fedcore.recipe(name, schedule=sched)
    assert isinstance(fedcore.recipe("scaffold", local_update={"option": "I"}).provider("local_update"),
                      ScaffoldUpdate)
    assert isinstance(fedcore.recipe("fednova", schedule="buffered").provider("schedule"), type(schedule("buffered")))
    assert not isinstance(fedcore.recipe("fednova").provider("schedule"), AsyncSchedule)
