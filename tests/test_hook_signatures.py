"""One signature per hook: every registered component's hook methods take the spec's full argument set, so a third
party can call or subclass any built-in with the spec's keywords (issue 24 item 3)."""
from __future__ import annotations

import warnings

import attrs
import pytest

import fedcore
from fedcore.builtin import AllData, FedAvg, WholeModel
from fedcore.testing import AdvisoryCheckWarning, check_hook_signatures, parametrize_with_checks

CLASSES = sorted({e.obj for e in fedcore.list_components() if isinstance(e.obj, type)}, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_registered_class_takes_the_full_argument_set(cls):
    check_hook_signatures(cls.__new__(cls))  # the signature is the class's: no instance needs building


def test_built_ins_can_be_called_with_the_specs_keywords():
    from fedcore.models import tiny_mlp

    model = tiny_mlp(num_classes=3)
    client, state = fedcore.ClientInfo(id=0, num_samples=4), fedcore.ClientState(client_id=0)
    share = WholeModel().fedcore_split_model(model=model, client=client, state=state, ctx=None)
    picked = AllData().fedcore_select_data(client=client, indices=[3, 1], dataset=None, share=share, state=state,
                                           ctx=None)
    assert list(picked) == [3, 1] and set(share.upload) == set(model.state_dict())


@attrs.frozen(eq=False, kw_only=True)
class ShortSignature:
    """Takes a subset of fedcore_aggregate's arguments (pluggy accepts it)."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates):
        return FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=None)


def test_a_short_signature_fails_the_check_and_is_advisory_for_a_third_party():
    with pytest.raises(AssertionError, match=r"ShortSignature: .* fedcore_aggregate\(model, updates, ctx\) lacks ctx"):
        check_hook_signatures(ShortSignature())
    params = {p.id: p for p in parametrize_with_checks([ShortSignature()]).args[1]}
    component, check = params["ShortSignature[0]-check_hook_signatures"].values
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(component)  # a check added within 0.1: a third party's component gets a warning, not a failure
    assert [w.category for w in caught] == [AdvisoryCheckWarning]
    assert "required from fedcore 1.0" in str(caught[0].message)
