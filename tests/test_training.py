"""fedcore.training: the one local training loop and optimizer factory every local update uses."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.testing import tiny_data, tiny_model
from fedcore.training import make_optimizer, train_epochs
from fedcore.types import ClientData

ROOT = Path(__file__).resolve().parents[1]


def _reference(module, data, *, epochs, lr, momentum, mu, clip_norm, seed):
    """The loop written out in plain torch, as each local update had it before 0.2.0."""
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
    anchor = [p.detach().clone() for p in params]
    gen = torch.Generator().manual_seed(seed)
    losses, seen = 0.0, 0
    for _ in range(epochs):
        for x, y in batches(data.dataset, data.indices, 16, generator=gen):
            loss = nn.functional.cross_entropy(module(x), y)
            total = loss + 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))
            opt.zero_grad(set_to_none=True)
            total.backward()
            nn.utils.clip_grad_norm_(params, clip_norm)
            opt.step()
            losses += float(loss.detach()) * len(y)
            seen += len(y)
    return losses / seen


def test_train_epochs_is_bit_identical_to_the_plain_torch_loop():
    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=list(range(40)))
    a, b = tiny_model(), tiny_model()
    kw = dict(epochs=2, lr=0.1, momentum=0.9, mu=0.3, clip_norm=0.5)
    got = train_epochs(a, data, batch_size=16, generator=torch.Generator().manual_seed(7), **kw)
    want = _reference(b, data, seed=7, **kw)
    assert got == want
    for (k, v), w in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(v, w), f"{k} differs from the plain torch loop"


def test_only_trainable_parameters_change_and_the_module_is_left_in_train_mode():
    train, _ = tiny_data()
    model = tiny_model().eval()
    frozen = next(model.parameters())
    frozen.requires_grad_(False)
    before = frozen.detach().clone()
    train_epochs(model, ClientData(dataset=train, indices=range(32)), epochs=1, lr=0.5)
    assert torch.equal(frozen, before) and model.training


def test_lr_at_sets_the_rate_of_every_step():
    train, _ = tiny_data()
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps = []
    train_epochs(model, ClientData(dataset=train, indices=range(40)), epochs=2, lr=1.0, batch_size=16,
                 lr_at=lambda step: steps.append(step) or 0.0)
    assert steps == [0, 1, 2, 3, 4, 5]  # ceil(40 / 16) = 3 steps per epoch
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items()), "lr 0 still moved the model"


def test_a_custom_loss_and_mu_none_versus_zero():
    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=range(32))

    def squared(module, x, y):
        return module(x).pow(2).mean()

    a, b = tiny_model(), tiny_model()
    la = train_epochs(a, data, epochs=1, lr=0.1, loss=squared, mu=None, generator=torch.Generator().manual_seed(0))
    lb = train_epochs(b, data, epochs=1, lr=0.1, loss=squared, mu=0.0, generator=torch.Generator().manual_seed(0))
    assert la == lb  # a proximal term of weight zero changes nothing
    assert all(torch.equal(v, w) for v, w in zip(a.state_dict().values(), b.state_dict().values()))


def test_bad_input_names_the_problem():
    with pytest.raises(ConfigError, match=r"optimizer='lbfgs' is not allowed; choose one of: sgd, adam"):
        make_optimizer("lbfgs", [nn.Parameter(torch.zeros(1))], 0.1)
    model = tiny_model().requires_grad_(False)
    train, _ = tiny_data()
    with pytest.raises(ValueError, match="Sequential has no trainable parameters"):
        train_epochs(model, ClientData(dataset=train, indices=range(4)), epochs=1, lr=0.1)
    assert isinstance(make_optimizer("adam", [nn.Parameter(torch.zeros(1))], 0.1), torch.optim.Adam)


def test_there_is_one_optimizer_factory_and_one_local_loop():
    """No other module of the core or of a plugin defines its own ``make_optimizer`` or CE loop helper. Only a file
    whose text holds one of the names can define it, so only those are parsed."""
    sources = [*ROOT.glob("fedcore/**/*.py"), *ROOT.glob("plugins/*/src/**/*.py"),
               *ROOT.glob("substrates/*/src/**/*.py")]
    names = ("make_optimizer", "train_trainable", "train_epochs")
    owners = []
    for path in sources:
        text = path.read_text()
        if not any(name in text for name in names):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                if node.name == "train_trainable" and "deprecated" in (ast.get_docstring(node) or "").lower():
                    continue
                owners.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert owners == ["fedcore/training.py:make_optimizer", "fedcore/training.py:train_epochs"]


def test_train_epochs_returns_the_steps_with_the_loss_and_stays_a_float():
    import json
    import pickle

    from fedcore.training import TrainResult

    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=list(range(40)))
    got = train_epochs(tiny_model(), data, epochs=3, lr=0.1, batch_size=16, generator=torch.Generator().manual_seed(7))
    assert isinstance(got, TrainResult) and isinstance(got, float)
    assert (got.steps, got.samples) == (3 * 3, 3 * 40)  # 40 samples in batches of 16: 3 per epoch
    assert got.loss == float(got) and json.loads(json.dumps({"loss": got}))["loss"] == float(got)
    again = pickle.loads(pickle.dumps(got))
    assert (float(again), again.steps, again.samples) == (float(got), got.steps, got.samples)


def test_the_gradient_hook_runs_before_each_step_on_true_gradients():
    """SCAFFOLD's correction g + (c - c_i) through the hook equals the plain torch loop that adds it itself."""
    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=list(range(40)))
    a, b = tiny_model(), tiny_model()
    correction = [torch.full_like(p, 0.01) for p in a.parameters()]
    steps = []

    def scaffold(step, params):
        steps.append(step)
        for p, c in zip(params, correction):
            p.grad.add_(c)

    got = train_epochs(a, data, epochs=2, lr=0.1, batch_size=16, clip_norm=0.5, adjust_grads=scaffold,
                       generator=torch.Generator().manual_seed(3))
    params = list(b.parameters())
    opt, gen = torch.optim.SGD(params, lr=0.1), torch.Generator().manual_seed(3)
    for _ in range(2):
        for x, y in batches(data.dataset, data.indices, 16, generator=gen):
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(b(x), y).backward()
            for p, c in zip(params, correction):
                p.grad.add_(c)
            nn.utils.clip_grad_norm_(params, 0.5)  # the hook runs before clipping
            opt.step()
    assert steps == list(range(got.steps)) == list(range(6))
    for (k, v), w in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(v, w), f"{k} differs from the loop that corrects its own gradients"


def test_the_gradient_hook_sees_unscaled_gradients_under_fp16_loss_scaling(monkeypatch):
    from fedcore.runtime.placement import Placement
    import fedcore.training

    train, _ = tiny_data()
    data = ClientData(dataset=train, indices=list(range(16)))
    model = tiny_model()
    x, y = next(iter(batches(data.dataset, data.indices, 16, shuffle=False)))
    nn.functional.cross_entropy(model(x), y).backward()
    true = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    seen = []
    placement = Placement(device="cpu", precision="fp16")  # the CPU scaler: a 2**16 loss scale, like CUDA's
    assert placement.grad_scaler() is not None
    # the loop's loss scaler without fp16 autocast (the CPU has none), so the gradients compare with fp32's
    monkeypatch.setattr(fedcore.training, "active_placement", lambda: placement)
    train_epochs(model, data, epochs=1, lr=0.1, batch_size=16, generator=None,
                 adjust_grads=lambda step, params: seen.append([p.grad.detach().clone() for p in params]))
    assert len(seen) == 1
    for got, want in zip(seen[0], true):
        torch.testing.assert_close(got, want)  # scaled, they would be 65536 times larger


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 1e-3), (0.0, 5e-4)])
def test_train_epochs_sgd_steps_exactly_as_torch_optim_sgd(momentum, weight_decay):
    """train_epochs' own SGD (no torch.optim, so no torch._dynamo import) gives torch.optim.SGD's weights, bit for
    bit, lr schedule included."""
    from fedcore.data import ArrayDataset
    from fedcore.models import micro_cnn
    g = torch.Generator().manual_seed(1)
    data = ClientData(dataset=ArrayDataset(torch.randn(40, 1, 8, 8, generator=g), torch.randint(0, 10, (40,),
                                                                                               generator=g)),
                      indices=list(range(40)))
    torch.manual_seed(0)
    ours, theirs = micro_cnn(num_classes=10), micro_cnn(num_classes=10)
    theirs.load_state_dict(ours.state_dict())
    plan = dict(epochs=2, lr=0.05, momentum=momentum, weight_decay=weight_decay, batch_size=8,
                lr_at=lambda step: 0.05 / (1 + step))
    made = []
    real = torch.optim.SGD

    def torch_sgd(params, lr, momentum=0.0, weight_decay=0.0):
        made.append(real(params, lr=lr, momentum=momentum, weight_decay=weight_decay))
        return made[-1]

    loss = train_epochs(ours, data, generator=torch.Generator().manual_seed(2), **plan)
    with pytest.MonkeyPatch.context() as mp:  # the same loop through torch.optim.SGD
        mp.setattr("fedcore.training.PlainSGD", lambda params, lr, momentum, weight_decay:
                   torch_sgd(params, lr, momentum, weight_decay))
        torch_loss = train_epochs(theirs, data, generator=torch.Generator().manual_seed(2), **plan)
    assert made and isinstance(made[0], torch.optim.SGD)
    assert float(loss) == float(torch_loss)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert torch.equal(a, b), name
