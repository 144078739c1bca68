"""The server's check of an update (fedcore/engine/validate.py): the one-call finiteness test and its fall-back.

``all_finite`` may only say True when every floating value is finite; when it cannot tell (a norm that overflows,
mixed devices or dtypes it does not take) ``update_problem`` checks entry by entry, so the verdict and the message
(the first problem in entry order) are the ones of the entry-by-entry loop.
"""
from __future__ import annotations

import pytest
import torch

from fedcore.engine.validate import all_finite, update_problem
from fedcore.types import ClientUpdate


def tensors(n: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {f"w{i}": torch.randn(4, 3, generator=g) for i in range(n)}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", [0, 3, 5])
def test_one_bad_value_anywhere_is_found(bad, where):
    entries = tensors()
    entries[f"w{where}"][1, 2] = bad
    assert not all_finite(list(entries.values()))
    update = ClientUpdate(client_id=0, tensors=entries, num_examples=3)
    assert update_problem(update, upload=tuple(entries)) == f"entry 'w{where}' contains NaN or Inf"


def test_finite_values_whose_norm_overflows_are_accepted_by_the_fall_back():
    entries = tensors()
    entries["w2"][0, 0] = 3e38  # finite in float32; its square is not
    assert not all_finite(list(entries.values()))
    assert update_problem(ClientUpdate(client_id=0, tensors=entries, num_examples=3), upload=tuple(entries)) is None


def test_mixed_dtypes_integers_and_aux_entries():
    entries = {"a": torch.ones(3, dtype=torch.float16), "b": torch.ones(2, dtype=torch.bfloat16),
               "c": torch.arange(4), "d": torch.ones(2, dtype=torch.float64)}
    assert all_finite(list(entries.values())) and all_finite([torch.arange(3)]) and all_finite([])
    entries["a"][1] = float("nan")
    assert not all_finite(list(entries.values()))
    update = ClientUpdate(client_id=0, tensors={"w": torch.ones(2)}, num_examples=1,
                          aux={"control": torch.tensor([1.0, float("inf")])})
    assert update_problem(update, upload=("w",)) == "server-bound tensor 'control' contains NaN or Inf"


def test_the_first_problem_in_entry_order_is_the_one_reported():
    entries = tensors(3)
    entries["w0"][0, 0] = float("nan")
    base = {"w1": torch.zeros(5)}  # w1 also has the wrong shape, after w0's NaN
    update = ClientUpdate(client_id=0, tensors=entries, num_examples=3, base=base)
    assert update_problem(update, upload=tuple(entries)) == "entry 'w0' contains NaN or Inf"
    entries["w0"][0, 0] = 0.0
    assert update_problem(update, upload=tuple(entries)) == "entry 'w1' has shape (4, 3), expected (5,)"
