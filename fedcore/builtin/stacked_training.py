"""Many clients of one architecture trained at once: stacked parameters, ``functional_call``, ``vmap`` over ``grad``.

Step ``k`` takes every client's ``k``-th batch together. Clients whose batches differ in size are padded
to the largest and their loss masked (FedJAX's pad-and-mask: each real sample weighs ``1/n``, a padding row
nothing); a client that has run out of batches sits the step out. A model whose layers couple the
samples of a batch (BatchNorm in training mode) cannot be padded without changing its statistics, so
there the clients of a step are grouped by batch size instead and each group runs unpadded.

Dropout draws its masks from each client's own generator, in the order and shapes the lone client's
``nn.Dropout`` calls would have drawn them from torch's global RNG (on the CPU the values are the same
bits); the masks enter the batched forward as buffers of a stand-in module.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from fedcore.builtin.stacked_optim import Stacked, StackedOptimizer

Batch = tuple[torch.Tensor, torch.Tensor]


class GivenMask(nn.Module):
    """Stands in for ``nn.Dropout`` in the batched forward: multiplies by the mask handed in as buffer ``mask``."""

    mask: torch.Tensor

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.register_buffer("mask", torch.empty(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask


@attrs.frozen(kw_only=True)
class DropoutSite:
    """One ``nn.Dropout`` call of a forward: the buffer name of its mask, its ``p`` and the per-sample shape."""

    mask: str
    p: float
    shape: tuple[int, ...]

    def draw(self, n: int, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        """The scaled keep-mask ``F.dropout`` draws for ``n`` samples (same ops, same generator consumption)."""
        if self.p == 0.0:
            return torch.ones((n, *self.shape), dtype=dtype)
        if self.p == 1.0:
            return torch.zeros((n, *self.shape), dtype=dtype)
        noise = torch.empty((n, *self.shape), dtype=dtype).bernoulli_(1 - self.p, generator=generator)
        return noise.div_(1 - self.p)


def replace_dropout(template: nn.Module, sample: torch.Tensor) -> list[DropoutSite]:
    """Swap every ``nn.Dropout(p > 0)`` of ``template`` for a :class:`GivenMask`; returns the sites in call order.

    A probe forward on one sample (no grad, eval mode) records the order and per-sample input shapes.
    A dropout module called twice per forward is refused (``ValueError``): its draws could not be told apart.
    """
    found = {name: m for name, m in template.named_modules() if type(m) is nn.Dropout and float(m.p) > 0}
    if not found:
        return []
    calls: list[tuple[str, tuple[int, ...]]] = []
    handles = [m.register_forward_pre_hook(lambda _m, args, name=name: calls.append((name, tuple(args[0].shape[1:]))))
               for name, m in found.items()]
    was_training = template.training
    try:
        template.eval()
        with torch.no_grad():
            template(sample[:1])
    finally:
        for h in handles:
            h.remove()
        template.train(was_training)
    names = [name for name, _ in calls]
    if len(set(names)) != len(names):
        raise ValueError(f"a dropout module is called more than once per forward ({names})")
    sites = []
    for name, shape in calls:
        parent, _, leaf = name.rpartition(".")
        owner = template.get_submodule(parent) if parent else template
        p = float(found[name].p)  # type: ignore[arg-type]
        setattr(owner, leaf, GivenMask(p))
        sites.append(DropoutSite(mask=f"{name}.mask", p=p, shape=shape))
    return sites


@attrs.define(eq=False, kw_only=True)
class StackedRun:
    """The stacked state of a cohort chunk and how to step it.

    ``train`` (trainable parameters), ``frozen`` (the other parameters) and ``buffers`` map state names
    to tensors of shape ``(clients, *shape)``; ``shared`` holds frozen parameters every client has the same
    value of (a frozen backbone), unstacked: ``vmap`` then runs each of their layers as one pass over the
    concatenated batches of all clients. ``streams[i]`` is client ``i``'s batches in order. ``clip_norm > 0``
    clips each client's gradient norm as ``torch.nn.utils.clip_grad_norm_`` does.
    """

    template: nn.Module
    train: Stacked
    frozen: Stacked
    buffers: Stacked
    streams: Sequence[Sequence[Batch]]
    optimizer: StackedOptimizer
    shared: Stacked = attrs.field(factory=dict)
    mu: float | None = None
    clip_norm: float = 0.0
    pad: bool = True
    dropout: Sequence[DropoutSite] = ()
    generators: Sequence[torch.Generator | None] = ()
    book: Callable[[int, int], None] = lambda client, n: None

    def fit(self) -> list[float]:
        """Train every client on all its batches; returns each client's mean loss (as ``train_epochs`` does).

        On the CPU, attention runs on torch's math kernel: the fused CPU kernel has no batching rule, and
        ``vmap`` would fall back to a loop over the clients.
        """
        device = next(iter(self.train.values())).device
        if device.type == "cpu":
            with sdpa_kernel([SDPBackend.MATH]):
                return self._fit()
        return self._fit()

    def _fit(self) -> list[float]:
        clients = len(self.streams)
        anchor = {k: v.detach().clone() for k, v in self.train.items()} if self.mu is not None else None
        loss_sum, seen = [0.0] * clients, [0] * clients
        pending: list[tuple[list[int], list[int], torch.Tensor]] = []
        for k in range(max((len(s) for s in self.streams), default=0)):
            active = [i for i in range(clients) if k < len(self.streams[i])]
            for group in self._groups(active, k):
                sizes = [len(self.streams[i][k][1]) for i in group]
                values = self._step(group, k, sizes, anchor)
                for i, n in zip(group, sizes):
                    self.book(i, n)
                pending.append((group, sizes, values))
        for group, sizes, values in pending:  # one transfer at the end; the sums run in each client's step order
            for i, n, v in zip(group, sizes, values.tolist()):
                loss_sum[i] += float(v) * n
                seen[i] += n
        return [s / max(n, 1) for s, n in zip(loss_sum, seen)]

    def _groups(self, active: list[int], k: int) -> list[list[int]]:
        if self.pad:
            return [active] if active else []
        by_size: dict[int, list[int]] = {}
        for i in active:
            by_size.setdefault(len(self.streams[i][k][1]), []).append(i)
        return list(by_size.values())

    def _step(self, group: list[int], k: int, sizes: list[int], anchor: Stacked | None) -> torch.Tensor:
        rows = None if len(group) == len(self.streams) else torch.tensor(group)
        width = max(sizes)
        device = next(iter(self.train.values())).device
        xs = torch.stack([_pad(self.streams[i][k][0], width) for i in group]).to(device)
        ys = torch.stack([_pad(self.streams[i][k][1], width) for i in group]).to(device)
        weights = None
        if any(n != width for n in sizes):
            weights = torch.stack([(torch.arange(width) < n).to(xs.dtype if xs.is_floating_point() else torch.float32)
                                   / n for n in sizes]).to(device)
        masks = {site.mask: torch.stack([_pad(site.draw(n, self._generator(i), _float_dtype(self.train)), width)
                                         for i, n in zip(group, sizes)]).to(device) for site in self.dropout}
        train = _take(self.train, rows)
        buffers = _take(self.buffers, rows)
        args: list[Any] = [train, _take(self.frozen, rows), buffers, masks, xs, ys, weights,
                           _take(anchor, rows) if anchor is not None else None, self.shared]
        in_dims = tuple(None if a is None else 0 for a in args[:-1]) + (None,)
        grads, (_, values) = vmap(grad_and_value(self._loss, has_aux=True), in_dims=in_dims)(*args)
        if self.clip_norm > 0:
            _clip(grads, self.clip_norm)
        if rows is not None:
            for key, value in buffers.items():  # BatchNorm updated the gathered copies in place
                self.buffers[key][rows] = value
        self.optimizer.step(self.train, grads, rows, k)
        return values.detach()

    def _generator(self, i: int) -> torch.Generator:
        gen = self.generators[i]
        assert gen is not None, "dropout needs each client's generator"
        return gen

    def _loss(self, train: Stacked, frozen: Stacked, buffers: Stacked, masks: Stacked, x: torch.Tensor,
              y: torch.Tensor, weights: torch.Tensor | None, anchor: Stacked | None, shared: Stacked
              ) -> tuple[torch.Tensor, torch.Tensor]:
        out = functional_call(self.template, ({**train, **frozen, **shared}, {**buffers, **masks}), (x,))
        if weights is None:
            value = nn.functional.cross_entropy(out, y)
        else:
            value = (nn.functional.cross_entropy(out, y, reduction="none") * weights).sum()
        total = value
        if anchor is not None:
            assert self.mu is not None
            total = value + 0.5 * float(self.mu) * sum(((train[k] - anchor[k]) ** 2).sum() for k in train)
        return total, value


def _clip(grads: Stacked, max_norm: float) -> None:
    """Each client's ``clip_grad_norm_(max_norm)``: the 2-norm of its per-tensor 2-norms, scaled to ``max_norm``."""
    norms = [torch.linalg.vector_norm(g.reshape(len(g), -1), dim=1) for g in grads.values()]
    total = torch.linalg.vector_norm(torch.stack(norms, dim=1), dim=1)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads.values():
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))


def _take(stacked: Stacked | None, rows: torch.Tensor | None) -> Stacked:
    if stacked is None:
        return {}
    return dict(stacked) if rows is None else {k: v[rows] for k, v in stacked.items()}


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    if len(t) == width:
        return t
    return torch.cat([t, t.new_zeros((width - len(t), *t.shape[1:]))])


def _float_dtype(stacked: Stacked) -> torch.dtype:
    return next((v.dtype for v in stacked.values() if v.is_floating_point()), torch.float32)
