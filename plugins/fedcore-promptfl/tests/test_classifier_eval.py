"""``classifier-eval``: the built-in global accuracy and loss, plus macro-F1 (Tables 4.2-4.3 report both)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedcore.builtin import GlobalEval
from fedcore.data import ArrayDataset
from fedcore_clip import macro_f1
from fedcore_promptfl import ClassifierEval


def test_accuracy_and_loss_are_global_evals_and_macro_f1_is_over_the_predictions():
    gen = torch.Generator().manual_seed(0)
    data = ArrayDataset(torch.randn(50, 8, generator=gen), torch.randint(0, 5, (50,), generator=gen))
    torch.manual_seed(0)
    model = nn.Linear(8, 5).train()
    # several batches
    ours = ClassifierEval(batch_size=7).fedcore_evaluate(model=model, dataset=data, clients=[], states=[], ctx=None)
    builtin = GlobalEval(batch_size=7).fedcore_evaluate(model=model, dataset=data, clients=[], states=[], ctx=None)
    assert ours["test_accuracy"] == builtin["test_accuracy"] and ours["test_loss"] == builtin["test_loss"]
    assert model.training  # evaluated in eval mode, train mode restored
    with torch.no_grad():
        pred = model(data.x).argmax(-1)
    assert ours["test_macro_f1"] == pytest.approx(macro_f1(pred, data.y, 5))
    assert ClassifierEval().fedcore_evaluate(model=model, dataset=None, clients=[], states=[], ctx=None) == {}


def test_macro_f1_is_not_accuracy_for_a_model_that_always_says_class_0():
    data = ArrayDataset(torch.zeros(12, 2), torch.tensor([0, 1, 2] * 4))
    model = nn.Linear(2, 3)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([1.0, 0.0, 0.0]))
    out = ClassifierEval().fedcore_evaluate(model=model, dataset=data, clients=[], states=[], ctx=None)
    # class 0: 4 true positives, 8 false positives -> F1 = 8 / 16; classes 1 and 2: F1 = 0
    assert out["test_accuracy"] == pytest.approx(1 / 3)
    assert out["test_macro_f1"] == pytest.approx(0.5 / 3)
