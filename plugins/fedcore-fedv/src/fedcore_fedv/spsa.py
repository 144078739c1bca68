"""Zeroth-order gradient estimates by simultaneous perturbation (SPSA; Spall 1992), independent of FL.

``g = (f(w + eps z) - f(w - eps z)) / (2 eps) * z`` with ``z ~ N(0, I)`` (FedVZ, Eq. 5) or Rademacher
``z`` (classical SPSA); ``estimator="forward"`` uses ``(f(w + eps z) - f(w)) / eps`` (one extra
evaluation). Directions are regenerated from an integer seed per tensor in a fixed order (MeZO's
trick), so an estimate travels and is stored as ``(seed, projected gradient)``: O(1) in the number
of parameters. Averaging over ``num_directions`` seeds reduces the variance.

The two-point form is unbiased for quadratics (for smooth ``f`` it estimates the gradient of a
Gaussian-smoothed ``f``); ``tests/test_spsa.py`` checks this on ``1/2 ||A w - b||^2``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import torch

from fedcore.rng import derive_seed
from fedcore.settings import setting

Params = Mapping[str, torch.Tensor]


@attrs.frozen(eq=False, kw_only=True)
class SPSA:
    """Gaussian (or Rademacher) simultaneous-perturbation gradient estimator over a dict of tensors."""

    eps: float = setting(1e-4, low=0.0, low_open=True, help="perturbation scale epsilon (> 0)")
    num_directions: int = setting(1, low=1, help="directions (queries) averaged per estimate (>= 1)")
    distribution: str = setting("gaussian", choices=("gaussian", "rademacher"))
    estimator: str = setting("central", choices=("central", "forward"),
                             help="central: 2 evaluations per direction (Eq. 5); forward: 1 plus f(w)")

    def seeds(self, seed: int) -> list[int]:
        """One seed per direction, derived from ``seed``."""
        if self.num_directions == 1:
            return [seed]
        return [derive_seed(seed, "spsa", k) for k in range(self.num_directions)]

    def direction(self, params: Params, seed: int) -> dict[str, torch.Tensor]:
        """``z`` for ``seed``, shaped like ``params`` (regenerated identically every time)."""
        g = torch.Generator().manual_seed(int(seed) & ((1 << 63) - 1))
        out = {}
        for name, p in params.items():
            if self.distribution == "gaussian":
                z = torch.randn(p.shape, generator=g, dtype=torch.float32)
            else:
                z = torch.randint(0, 2, p.shape, generator=g).to(torch.float32) * 2 - 1
            out[name] = z.to(device=p.device, dtype=p.dtype)  # drawn on the CPU: the same z on every device
        return out

    def points(self, params: Params, seed: int) -> list[dict[str, torch.Tensor]]:
        """Where to evaluate ``f`` for one direction: ``[w + eps z, w - eps z]`` (central) or ``[w + eps z]``."""
        z = self.direction(params, seed)
        with torch.no_grad():
            plus = {k: p.detach() + self.eps * z[k] for k, p in params.items()}
            if self.estimator == "forward":
                return [plus]
            return [plus, {k: p.detach() - self.eps * z[k] for k, p in params.items()}]

    def projected(self, losses: list[float], base: float | None = None) -> float:
        """The scalar directional derivative estimate from the losses at :meth:`points`."""
        if self.estimator == "central":
            if len(losses) != 2:
                raise ValueError(f"central SPSA needs 2 losses per direction, got {len(losses)}")
            return (float(losses[0]) - float(losses[1])) / (2 * self.eps)
        if base is None or len(losses) != 1:
            raise ValueError("forward SPSA needs one loss per direction and the unperturbed loss `base`")
        return (float(losses[0]) - float(base)) / self.eps

    def gradient(self, params: Params, seeds: list[int], projected: list[float]) -> dict[str, torch.Tensor]:
        """``mean_k projected[k] * z(seeds[k])``: the estimate rebuilt from seeds and scalars."""
        out = {k: torch.zeros_like(p, dtype=torch.float32) for k, p in params.items()}
        for s, pg in zip(seeds, projected):
            for k, z in self.direction(params, s).items():
                out[k].add_(z, alpha=float(pg) / len(seeds))
        return {k: v.to(params[k].dtype) for k, v in out.items()}

    def estimate(self, f: Callable[[dict[str, torch.Tensor]], float], params: Params, seed: int
                 ) -> dict[str, torch.Tensor]:
        """The full estimate of ``grad f(params)`` with ``num_directions`` directions derived from ``seed``."""
        seeds = self.seeds(seed)
        base = float(f(dict(params))) if self.estimator == "forward" else None
        pgs = [self.projected([float(f(pt)) for pt in self.points(params, s)], base) for s in seeds]
        return self.gradient(params, seeds, pgs)
