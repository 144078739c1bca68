"""clone_module (the working copy every client gets) behaves like copy.deepcopy on real models."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fedcore.builtin.clone import clone_module, share_frozen_copy
from fedcore.models import micro_cnn, micro_vit, tiny_mlp


def lora_vit():
    from peft import LoraConfig, inject_adapter_in_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return inject_adapter_in_model(LoraConfig(r=4, target_modules=["qkv"]), micro_vit())


def hooked_cnn():
    m = micro_cnn()
    m[0].requires_grad_(False)       # a frozen stage
    m[1].eval()                      # a submodule in eval mode
    m.register_forward_hook(lambda mod, inp, out: out * 2.0)
    return m


def tied():
    m = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    m[3].weight = m[1].weight
    return m


MODELS = {"micro-cnn": micro_cnn, "micro-vit": micro_vit, "tiny-mlp": tiny_mlp, "lora-vit": lora_vit,
          "hooked-cnn": hooked_cnn, "tied": tied}


@pytest.mark.parametrize("name", list(MODELS))
def test_clone_equals_deepcopy_and_is_independent(name):
    torch.manual_seed(0)
    m = MODELS[name]()
    c, d = clone_module(m), copy.deepcopy(m)
    for other in (c, d):
        assert [type(x) for x in other.modules()] == [type(x) for x in m.modules()]
        assert [x.training for x in other.modules()] == [x.training for x in m.modules()]
        assert [(n, type(p), p.requires_grad) for n, p in other.named_parameters()] == \
               [(n, type(p), p.requires_grad) for n, p in m.named_parameters()]
        so, sm = other.state_dict(), m.state_dict()
        assert list(so) == list(sm)
        for k in sm:
            assert torch.equal(so[k], sm[k]) and so[k].dtype == sm[k].dtype and so[k].stride() == sm[k].stride()
            assert so[k].data_ptr() != sm[k].data_ptr(), f"{k} shares memory with the original"
    x = torch.randn(3, 1, 8, 8) if name != "tied" else torch.randn(3, 64)
    m.eval(), c.eval(), d.eval()
    with torch.no_grad():
        assert torch.equal(c(x), m(x)) and torch.equal(d(x), m(x))  # hooks were copied too
    # training the clone leaves the original alone
    c.train()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    opt = torch.optim.SGD([p for p in c.parameters() if p.requires_grad], lr=0.1)
    c(x).float().pow(2).mean().backward()
    opt.step()
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert all(p.grad is None for p in m.parameters())


def test_shared_parameters_stay_shared_like_deepcopy():
    m = tied()
    c = clone_module(m)
    assert c[3].weight is c[1].weight and c[1].weight is not m[1].weight
    assert len(list(c.parameters())) == len(list(m.parameters()))


def test_fallbacks_keep_deepcopy_semantics():
    class Custom(nn.Module):
        """Has its own __deepcopy__: must be respected."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.copies = 0

        def __deepcopy__(self, memo):
            new = Custom()
            new.load_state_dict(self.state_dict())
            new.copies = self.copies + 1
            return new

    outer = nn.Sequential(Custom(), nn.Linear(2, 2))
    outer.register_buffer("base", torch.arange(6.0))
    outer.register_buffer("view", outer.base[2:4])        # a view: deepcopy keeps it a view of the copied base
    outer[1].weight.grad = torch.ones(2, 2)                 # a gradient: deepcopy keeps it on the parameter
    outer.extra = {"lists": [1, 2], "tensor": torch.zeros(1)}  # arbitrary attributes
    c = clone_module(outer)
    assert c[0].copies == 1
    assert c.view.data_ptr() == c.base.data_ptr() + 2 * 4 and torch.equal(c.view, outer.view)
    assert c.base.data_ptr() != outer.base.data_ptr()
    d = copy.deepcopy(outer)
    assert (c[1].weight.grad is None) == (d[1].weight.grad is None)
    assert c.extra == {"lists": [1, 2], "tensor": torch.zeros(1)} and c.extra["lists"] is not outer.extra["lists"]


def test_whole_model_share_uses_it():
    from fedcore.testing import build_engine, round_context

    engine = build_engine([])
    model = engine.run_ctx.server.model
    share = engine.hooks.fedcore_split_model(model=model, client=engine.run_ctx.clients[0],
                                             state=engine.run_ctx.client_states[0], ctx=round_context(engine))
    assert share.module is not model
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(share.module.parameters(), model.parameters()))


def test_share_frozen_copy_shares_only_frozen_stateless_parts():
    """Frozen parameters not named in ``own`` (and frozen subtrees of stateless layers) are the original's; the rest
    (trainable or owned parameters, buffers, layers whose training flag matters) is copied, so training the copy
    and switching its mode leave the original alone, and the copy computes what the original computes."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.GELU()), nn.Dropout(0.5), nn.BatchNorm1d(8),
                      nn.Linear(8, 3), nn.Linear(3, 3))
    for layer in (m[0], m[1], m[3], m[5]):
        layer.requires_grad_(False)
    c = share_frozen_copy(m, own=["5.weight"])
    assert c is not m and c[0] is m[0] and c[1] is m[1]  # frozen stateless subtrees: the same objects
    assert c[2] is not m[2] and c[3] is not m[3] and c[4] is not m[4] and c[5] is not m[5]
    assert c[3].weight is m[3].weight and c[3].running_mean is not m[3].running_mean  # buffers are copied
    assert c[4].weight is not m[4].weight and c[5].weight is not m[5].weight and c[5].bias is m[5].bias
    assert ([(n, p.requires_grad) for n, p in c.named_parameters()]
            == [(n, p.requires_grad) for n, p in m.named_parameters()])
    x = torch.randn(5, 4)
    m.eval(), c.eval()
    assert torch.equal(c(x), m(x)) and not m[2].training
    c.train()
    assert not m[2].training and not m[3].training  # their own flags
    before = {k: v.clone() for k, v in m.state_dict().items()}
    opt = torch.optim.SGD([p for p in c.parameters() if p.requires_grad], lr=0.1)
    c(x).pow(2).mean().backward()
    opt.step()
    with torch.no_grad():
        c[5].weight.add_(1.0)  # an owned frozen entry (a download lands there)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert all(p.grad is None for p in m.parameters())


def test_share_frozen_copy_of_a_lora_vit_matches_and_keeps_ties():
    m = lora_vit()
    c = share_frozen_copy(m)
    x = torch.randn(3, 1, 8, 8)
    m.eval(), c.eval()
    assert torch.equal(c(x), m(x))
    frozen = [n for n, p in m.named_parameters() if not p.requires_grad]
    assert frozen and all(c.get_parameter(n) is m.get_parameter(n) for n in frozen)
    assert all(c.get_parameter(n) is not p for n, p in m.named_parameters() if p.requires_grad)
    t = tied()
    t[1].requires_grad_(False)
    ct = share_frozen_copy(t, own=["3.weight"])  # owned under one name of a tied pair: owned under both
    assert ct[3].weight is ct[1].weight and ct[1].weight is not t[1].weight
