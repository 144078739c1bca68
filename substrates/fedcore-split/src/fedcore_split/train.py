"""The client side of split training: one local update through a :class:`~fedcore_split.endpoint.Connection`.

Per batch (U-shaped split): ``h = bottom(x)`` goes up, ``b = server(h)`` comes down, the client computes
its loss with ``top(b)`` (labels never leave it), sends ``dL/db`` up and gets ``dL/dh`` back to train its
bottom. ``bottom_grad`` chooses how the bottom is trained:

* ``"backprop"``: with the server's ``dL/dh`` (every split-learning paper's default);
* ``"zo"``: no gradient crosses: the client estimates ``dL/dh`` from two extra server forwards of
  ``h +- eps u`` and its own losses (activation-space SPSA, ``u ~ N(0, I)``);
* ``"frozen"``: the bottom is not trained.

Two-part splits (no ``top``) send the labels up and get the loss and ``dL/dh`` back. After the last
batch's backward the server may ask for loss queries (FedVZ) before the client steps its optimizer,
so the queries are scored by the segments that produced that batch's loss.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.runtime import book_samples
from fedcore.stash import StashKey
from fedcore.training import make_optimizer
from fedcore.types import ClientData, ClientState, Share
from fedcore_split.stages import Segment

CLIENT_OPTIMIZER = StashKey[dict]("fedcore.split.client-optimizer")  # client stash: optimizer state kept across rounds


def train_split(share: Share, data: ClientData, ctx: Any, *, epochs: int, batch_size: int, lr: float,
                optimizer: str = "adam", momentum: float = 0.0, weight_decay: float = 0.0,
                bottom_grad: str = "backprop", zo_eps: float = 1e-3, keep_optimizer: ClientState | None = None
                ) -> dict[str, float]:
    """Train ``share.module`` on ``data`` against ``share.endpoint``; returns metrics (mean loss, steps).

    ``keep_optimizer``: the client's state, whose stash keeps the optimizer's state from round to round
    (on the client, never sent); ``None`` starts a fresh optimizer every round.
    """
    module = share.module
    if not isinstance(module, Segment):
        raise ConfigError(f"train_split trains a split share (a fedcore_split.Segment); got {type(module).__name__}")
    module.train()
    two_part = "top" not in module.parts
    frozen = {id(p) for p in module.part_parameters("bottom")} if bottom_grad == "frozen" else set()
    params = [p for p in module.parameters() if p.requires_grad and id(p) not in frozen]
    opt = make_optimizer(optimizer, params, lr, momentum, weight_decay)
    if keep_optimizer is not None and CLIENT_OPTIMIZER in keep_optimizer.stash:
        opt.load_state_dict(keep_optimizer.stash[CLIENT_OPTIMIZER])
    gen = ctx.rng("shuffle")
    total_steps = epochs * math.ceil(len(data) / batch_size)
    zo_gen = ctx.rng("bottom-zo")
    step, loss_sum, seen = 0, 0.0, 0
    with share.endpoint.connect(ctx.channel) as server:
        for _ in range(epochs):
            for x, y in batches(data.dataset, data.indices, batch_size, generator=gen):
                step += 1
                final = step == total_steps
                opt.zero_grad(set_to_none=True)
                h = module.run("bottom", x)
                if two_part:
                    loss_value, grad_h = server.loss_and_backward(h, y, final=final)
                    if bottom_grad != "frozen":
                        h.backward(grad_h)
                else:
                    loss_value = _u_step(module, server, h, y, final, bottom_grad, zo_eps, zo_gen)
                opt.step()
                book_samples(module, len(y))  # the loop runs the parts, not module.forward: the clock's work unit
                loss_sum += loss_value * len(y)
                seen += len(y)
    if keep_optimizer is not None:
        keep_optimizer.stash[CLIENT_OPTIMIZER] = opt.state_dict()
    return {"loss": loss_sum / max(seen, 1), "steps": float(step)}


def _u_step(module: Segment, server: Any, h: torch.Tensor, y: torch.Tensor, final: bool, bottom_grad: str,
            zo_eps: float, zo_gen: torch.Generator) -> float:
    need_server_grad = bottom_grad == "backprop" or server.needs_backward(final)
    b = server.forward(h, final=final, grad=need_server_grad).requires_grad_(True)
    loss = nn.functional.cross_entropy(module.run("top", b), y)
    loss.backward()
    if need_server_grad:
        grad_h = server.backward(b.grad)
        if bottom_grad == "backprop":
            h.backward(grad_h)
    if bottom_grad == "zo":
        u = torch.randn(h.shape, generator=zo_gen).to(h.device)  # a CPU stream, the same on every device
        with torch.no_grad():
            hd = h.detach()
            plus = server.forward(hd + zo_eps * u, grad=False, cache=False)
            minus = server.forward(hd - zo_eps * u, grad=False, cache=False)
            diff = (nn.functional.cross_entropy(module.run("top", plus), y)
                    - nn.functional.cross_entropy(module.run("top", minus), y))
        h.backward(diff / (2 * zo_eps) * u)
    queries = server.loss_queries()
    if queries:
        was = module.training
        module.eval()
        with torch.no_grad():
            server.answer([float(nn.functional.cross_entropy(module.run("top", q), y)) for q in queries])
        module.train(was)
    return float(loss.detach())
