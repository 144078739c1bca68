"""SGD (with momentum) and Adam stepped over stacked parameters: one leading dimension per client.

Each client of a vectorised cohort must end where ``torch.optim`` would have taken it alone, so the
update is the single-tensor ``torch.optim.SGD`` / ``torch.optim.Adam`` arithmetic, op for op (the same
``add``, ``lerp_``, ``addcmul_`` and ``addcdiv_`` with the same scalars), applied to every client's
slice at once. All clients a step is taken for have taken the same number of steps before it (a
client's steps are its batches, in order), so the step count is one number per call.
"""
from __future__ import annotations

import attrs
import torch

from fedcore.errors import ConfigError

Stacked = dict[str, torch.Tensor]
"""Parameter name -> tensor of shape ``(clients, *shape)``."""


@attrs.define(eq=False, kw_only=True)
class StackedOptimizer:
    """``torch.optim.SGD(lr, momentum, weight_decay)`` or ``torch.optim.Adam(lr, weight_decay)`` per client slice.

    ``step(params, grads, rows, count)`` updates ``params[name][rows]`` in place from ``grads[name]``
    (shaped like the selected rows); ``rows=None`` means every client; ``count`` is how many steps
    these clients took before (0 for their first).
    """

    name: str
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    state: dict[str, dict[str, torch.Tensor]] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.name not in ("sgd", "adam"):
            raise ConfigError(f"optimizer={self.name!r} cannot be stacked; choose one of: sgd, adam")

    @torch.no_grad()
    def step(self, params: Stacked, grads: Stacked, rows: torch.Tensor | None, count: int) -> None:
        for key, grad in grads.items():
            full = params[key]
            param = full if rows is None else full[rows]
            slots = self.state.get(key)
            if slots is None:  # per-client state for every client, so a first step taken by some can be kept
                names = {"sgd": ("momentum_buffer",) if self.momentum != 0 else (), "adam": ("exp_avg", "exp_avg_sq")}
                slots = self.state[key] = {k: torch.zeros_like(full) for k in names[self.name]}
            if self.name == "sgd":
                self._sgd(param, grad, slots, rows, count)
            else:
                self._adam(param, grad, slots, rows, count)
            if rows is not None:
                full[rows] = param

    def _sgd(self, param: torch.Tensor, grad: torch.Tensor, slots: dict[str, torch.Tensor],
             rows: torch.Tensor | None, count: int) -> None:
        if self.weight_decay != 0:
            grad = grad.add(param, alpha=self.weight_decay)
        if self.momentum != 0:
            if count == 0:
                buf = grad.detach().clone()
            else:
                buf = _rows(slots["momentum_buffer"], rows)
                buf.mul_(self.momentum).add_(grad, alpha=1.0)
            _store(slots, "momentum_buffer", buf, rows)
            grad = buf
        param.add_(grad, alpha=-self.lr)

    def _adam(self, param: torch.Tensor, grad: torch.Tensor, slots: dict[str, torch.Tensor],
              rows: torch.Tensor | None, count: int) -> None:
        beta1, beta2 = self.betas
        if count == 0:
            exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
        else:
            exp_avg, exp_avg_sq = _rows(slots["exp_avg"], rows), _rows(slots["exp_avg_sq"], rows)
        step = float(count + 1)
        if self.weight_decay != 0:
            grad = grad.add(param, alpha=self.weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = self.lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(self.eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)
        _store(slots, "exp_avg", exp_avg, rows)
        _store(slots, "exp_avg_sq", exp_avg_sq, rows)


def _rows(full: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    return full if rows is None else full[rows]


def _store(slots: dict[str, torch.Tensor], key: str, value: torch.Tensor, rows: torch.Tensor | None) -> None:
    """Keep ``value`` as the state of ``rows`` (all clients when ``None``)."""
    if rows is None:
        slots[key] = value
        return
    slots[key][rows] = value
