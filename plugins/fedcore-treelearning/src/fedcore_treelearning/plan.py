"""The run's split plan: every client's split layer, solved from device profiles and re-solved periodically.

The plan lives in the server stash (``PLAN``) and is checkpointed (the splits and when they were solved).
Step 1 of the tree aggregation (thesis §3.3.2): profile the model once, read each client's device profile
(the run's ``SimClock`` table, else the presets; a client without a profile gets ``default_profile``), and
solve Alg. 2. Every ``repartition_every`` rounds the solver runs again, warm-started with the current
splits (§3.3.2, §3.6.2: "rarely changed"); a split that moves migrates units between client and server
(the share downloads what a client newly holds).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
from torch import nn

from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, clock_of, presets
from fedcore.stash import StashKey
from fedcore_treelearning.cost import SplitProblem
from fedcore_treelearning.profiler import ModelProfile, profile_model
from fedcore_treelearning.solver import branch_and_bound
from fedcore_treelearning.strips import deepest_tiling_split, strip_bounds
from fedcore_treelearning.tree import VERTICAL


@attrs.define(kw_only=True, eq=False)
class TreePlan:
    """Splits per client id, when they were last solved, how often; the profile and the round's server (not saved)."""

    splits: dict[int, int] = attrs.field(factory=dict)
    solved_round: int = -1
    solves: int = 0
    mode: str = "horizontal"
    bounds: dict[int, tuple[int, int]] = attrs.field(factory=dict)  # vertical: each client's column range
    profile: ModelProfile | None = None
    server: Any = None
    server_round: int = -1

    def state_dict(self) -> dict[str, Any]:
        return {"splits": {str(k): v for k, v in self.splits.items()}, "solved_round": self.solved_round,
                "solves": self.solves, "mode": self.mode,
                "bounds": {str(k): list(v) for k, v in self.bounds.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.splits = {int(k): int(v) for k, v in state.get("splits", {}).items()}
        self.solved_round = int(state.get("solved_round", -1))
        self.solves = int(state.get("solves", 0))
        self.mode = str(state.get("mode", "horizontal"))
        self.bounds = {int(k): (int(v[0]), int(v[1])) for k, v in state.get("bounds", {}).items()}
        self.server, self.server_round = None, -1


PLAN = StashKey[TreePlan]("fedcore.treelearning.plan")


def plan_of(holder: Any) -> TreePlan:
    """The plan in ``holder.server.stash`` (a run or round context), created empty on first use."""
    return holder.server.stash.setdefault(PLAN, TreePlan())


def probe_batch(train: Any, n: int = 2) -> torch.Tensor:
    x, _ = next(iter(batches(train, range(min(n, len(train))), n, shuffle=False)))
    return x


def devices_of(run: Any, clients: Sequence[Any], default_profile: str) -> list[DeviceProfile]:
    """Each client's device profile: the run's clock table if it has one, else fedcore's presets."""
    clock = clock_of(run)
    table = dict(getattr(clock, "profiles", None) or presets())
    out = []
    for c in clients:
        name = c.profile or default_profile
        if name not in table:
            raise ConfigError(f"client {c.id} has device profile {name!r}; known: {', '.join(sorted(table))}")
        out.append(table[name])
    return out


def uniform_split(n_units: int) -> int:
    """The SL baseline's common split: about half of the units on the client (thesis §3.6.1)."""
    return max(2, min(n_units, n_units // 2 + 1))


def solve(model: nn.Module, run: Any, *, mode: str, partition: str, fixed: Sequence[int] | None,
          strips: Sequence[int] | None, server_flops: float, batch_size: int, default_profile: str,
          monotone: bool, previous: Mapping[int, int] | None, plan: TreePlan, stream_scaled: bool = True
          ) -> dict[int, int]:
    """Split layer per client id for the run's clients (``partition`` = ``optimal`` or ``uniform``)."""
    clients = sorted(run.clients, key=lambda c: c.id)
    ids = [c.id for c in clients]
    sample = probe_batch(run.train)
    if plan.profile is None:
        plan.profile = profile_model(model, sample)
    profile = plan.profile
    n = profile.n_units
    devices = devices_of(run, clients, default_profile)
    problem = SplitProblem.from_devices(profile, devices, server_flops=server_flops, batch_size=batch_size)
    caps = list(problem.max_splits or [n] * len(ids))
    plan.mode = mode
    if mode == VERTICAL:
        bounds = strip_bounds(int(sample.shape[-1]), ids, strips)
        plan.bounds = dict(bounds)
        deepest = deepest_tiling_split(model, sample, bounds)
        caps = [min(cap, deepest) for cap in caps]
        widths = [(b - a) / sample.shape[-1] for a, b in bounds.values()]
        problem = attrs.evolve(problem, client_speeds=[v / f for v, f in zip(problem.client_speeds, widths)],
                               client_bandwidths=[bw / f for bw, f in zip(problem.client_bandwidths, widths)],
                               max_splits=tuple(caps))
    if fixed is not None:
        if len(fixed) != len(ids):
            raise ConfigError(f"splits={list(fixed)} gives {len(fixed)} split(s) for {len(ids)} clients; "
                              f"give one per client (in client-id order)")
        for i, s in enumerate(fixed):
            if isinstance(s, bool) or not isinstance(s, int) or not 2 <= s <= n:
                raise ConfigError(f"splits[{i}]={s!r} is outside the model: a {profile.model_type} has {n} units, "
                                  f"so a split is an int in 2..{n} (units 1..split-1 on the client)")
            if s > caps[i]:
                raise ConfigError(f"splits[{i}]={s} cannot be used by client {ids[i]}: its deepest possible split is "
                                  f"{caps[i]} ({'memory' if mode != VERTICAL else 'memory or strip tiling'})")
        splits = list(fixed)
    elif partition == "uniform":
        splits = [min(uniform_split(n), cap) for cap in caps]
    else:
        init = [previous[c] for c in ids] if previous and all(c in previous for c in ids) else None
        if init is not None and any(s > cap for s, cap in zip(init, caps)):
            init = None
        scaled = stream_scaled and mode != VERTICAL  # a vertical stream is one full-width map whoever joined
        splits = list(branch_and_bound(problem, init=init, monotone=monotone, stream_scaled=scaled).splits)
    return dict(zip(ids, splits))
