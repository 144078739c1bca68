"""fedcore's contract checks (frozen attrs, pickling, slot checks, checkpoint + exact resume) for each component.

The defaults of every registered component are also checked by fedcore's own suite (tests/test_registered_contracts.py);
here the other settings, and the server state under FedBuff's schedule. Each aggregator runs with its own client
(the pipeline refuses it with any other), so the resume check covers the control variates on both sides: SCAFFOLD's
``c`` in ``ServerState.aux`` and every ``c_i`` in ``ClientState.tensors``, FedDyn's ``h`` and gradient states.
"""
import attrs

from fedcore.builtin import BufferedSchedule
from fedcore.testing import CHECK_FIXTURE, parametrize_with_checks
from fedcore_drift import (
    FedDynAggregate,
    FedDynUpdate,
    FedNovaAggregate,
    FedNovaUpdate,
    ScaffoldAggregate,
    ScaffoldUpdate,
)


@parametrize_with_checks([ScaffoldUpdate(option="I"), ScaffoldUpdate(option="II", momentum=0.5),
                          FedNovaUpdate(momentum=0.9), FedDynUpdate(alpha=0.1)])
def test_client_contract(component, check):
    check(component)


@parametrize_with_checks([ScaffoldAggregate(server_lr=0.5, weighting="samples")],
                         fixture=attrs.evolve(CHECK_FIXTURE, companions=[ScaffoldUpdate(option="I")]))
def test_scaffold_option_i_contract(component, check):
    check(component)


@parametrize_with_checks([FedDynAggregate(alpha=0.1, weighting="samples")],
                         fixture=attrs.evolve(CHECK_FIXTURE, companions=[FedDynUpdate(alpha=0.1)]))
def test_feddyn_contract(component, check):
    check(component)


# resume under FedBuff: the server state, the client states and the in-flight updates all come back
@parametrize_with_checks([ScaffoldAggregate()], fixture=attrs.evolve(
    CHECK_FIXTURE, companions=[ScaffoldUpdate(), BufferedSchedule(buffer_size=2)]))
def test_scaffold_contract_buffered(component, check):
    check(component)


@parametrize_with_checks([FedNovaAggregate()], fixture=attrs.evolve(
    CHECK_FIXTURE, companions=[FedNovaUpdate(), BufferedSchedule(buffer_size=2)]))
def test_fednova_contract_buffered(component, check):
    check(component)
