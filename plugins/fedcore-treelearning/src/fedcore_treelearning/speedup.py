"""The simulated speed-up table (thesis Tab. 3.1 / Fig. 3.7 analogue, spec A8.2) and the resource table (Tab. 3.2).

Per model, mode and client count C: the per-epoch simulated time (:func:`~fedcore_treelearning.simulate.pass_time`)
of the SL baseline (horizontal: round-robin; vertical: synchronous aggregation; both at the common split, half of
the units on the client), TL without partition (pipelined, common split), TL with optimal split only (Alg. 2
splits, synchronous tree) and full TL (Alg. 2 splits, pipelined). Clients: ``tl-low/medium/high`` tiers mixed
2:1:1 by a seeded largest-remainder assignment; server 50 GFLOP/s; batch 16; an epoch is 10,000 samples (a fifth
of CIFAR-10's train set, to keep the event simulation under a minute; horizontal: split evenly across clients;
vertical: every client sees every sample on its strip).
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import attrs
import torch

from fedcore.runtime import DeviceProfile, ProfileAssignment, presets
from fedcore_treelearning.cifar_models import MODELS
from fedcore_treelearning.cost import SplitProblem
from fedcore_treelearning.plan import uniform_split
from fedcore_treelearning.profiler import ModelProfile, profile_model
from fedcore_treelearning.simulate import pass_time
from fedcore_treelearning.solver import branch_and_bound
from fedcore_treelearning.strips import deepest_tiling_split, strip_bounds

SERVER_FLOPS = 50e9
BATCH = 16
EPOCH = 10_000  # CIFAR-10 has 50,000: the per-iteration pattern is periodic, so ratios do not change
TIERS = {"tl-low": 2, "tl-medium": 1, "tl-high": 1}
CIFAR = 50_000
VARIANTS = ("SL", "TL-noPartition", "TL-syncOptimal", "TL")


@attrs.frozen(kw_only=True)
class SpeedupRow:
    model: str
    mode: str
    clients: int
    times: dict[str, float]
    splits: tuple[int, ...]  # client units (split - 1) per client, slowest first

    @property
    def ratio(self) -> float:
        return self.times["SL"] / self.times["TL"]


def client_devices(c: int, seed: int = 0) -> list[DeviceProfile]:
    table = presets()
    names = ProfileAssignment(weights=TIERS).assign(c, seed=seed)
    return sorted((table[n] for n in names), key=lambda d: d.flops)  # slowest first, as the thesis lists splits


def solve_splits(profile: ModelProfile, devices: Sequence[DeviceProfile], mode: str, cap: int,
                 stream_scaled: bool) -> list[int]:
    problem = SplitProblem.from_devices(profile, devices, server_flops=SERVER_FLOPS, batch_size=BATCH)
    caps = tuple(min(cap, m) for m in (problem.max_splits or [profile.n_units] * len(devices)))
    f = 1.0 / len(devices) if mode == "vertical" else 1.0  # a strip's work and map shrink: as if 1/f faster
    # Clients of one tier are interchangeable, so some optimum lists their splits in client order: a relative
    # 1e-12 speed step per client lets Alg. 2's monotone rule order them too (exact for identical devices; the
    # rule alone leaves equal-speed clients unordered, and 20 of them make the search exponential).
    speeds = [v / f * (1 + 1e-12 * i) for i, v in enumerate(problem.client_speeds)]
    problem = attrs.evolve(problem, client_speeds=speeds, client_bandwidths=[b / f for b in problem.client_bandwidths],
                           max_splits=caps)
    # stream_scaled charges server layer k for every client merged by k: right for horizontal batches; a vertical
    # stream is at most one full-width map whoever joined, which the thesis's constant Q^k already is
    return list(branch_and_bound(problem, stream_scaled=stream_scaled and mode == "horizontal").splits)


def speedup_row(name: str, profile: ModelProfile, mode: str, c: int, cap: int, stream_scaled: bool) -> SpeedupRow:
    devices = client_devices(c)
    if mode == "horizontal":
        per = math.ceil(EPOCH / c)
        batches = [math.ceil(per / BATCH)] * c
        fractions = None
    else:
        batches = [math.ceil(EPOCH / BATCH)] * c
        fractions = [1.0 / c] * c
    common = [min(uniform_split(profile.n_units), cap)] * c
    best = solve_splits(profile, devices, mode, cap, stream_scaled)

    def time(splits: Sequence[int], schedule: str) -> float:
        return pass_time(profile, devices, splits, batches=batches, batch_size=BATCH, server_flops=SERVER_FLOPS,
                         schedule=schedule, mode=mode, fractions=fractions).total

    sl_schedule = "round-robin" if mode == "horizontal" else "sync"
    times = {"SL": time(common, sl_schedule), "TL-noPartition": time(common, "pipelined"),
             "TL-syncOptimal": time(best, "sync"), "TL": time(best, "pipelined")}
    return SpeedupRow(model=name, mode=mode, clients=c, times=times, splits=tuple(s - 1 for s in best))


def profiles() -> dict[str, tuple[ModelProfile, int]]:
    """Each model's profile and the deepest split at which 2 equal width strips still tile (vertical cap)."""
    out = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for name, make in MODELS.items():
            model = make()
            sample = torch.randn(2, 3, 32, 32)
            out[name] = (profile_model(model, sample), deepest_tiling_split(model, sample, strip_bounds(32, [0, 1])))
    return out


def speedup_table(clients: Sequence[int] = (1, 2, 4, 6, 8, 12, 16, 20), *, stream_scaled: bool = True
                  ) -> list[SpeedupRow]:
    rows = []
    for name, (profile, cap) in profiles().items():
        for mode in ("horizontal", "vertical"):
            for c in clients:
                rows.append(speedup_row(name, profile, mode, c, profile.n_units if mode == "horizontal" else cap,
                                        stream_scaled))
    return rows


def resource_table(clients: int = 4) -> dict[str, dict[str, float]]:
    """Tab. 3.2 analogue, MobileNet x0.25, one epoch of CIFAR-10 (50,000 samples), ``clients`` mixed-tier clients.

    TL: the Alg. 2 splits; client GFLOPs = client units' forward+backward x samples; traffic = activations up +
    their gradients down (+ labels); learnable client parameters = the largest client part. FL (FedAvg, one round
    per epoch): every client trains the whole model; traffic = 2 x model bytes per client.
    """
    profile = profiles()["MobileNet"][0]
    devices = client_devices(clients)
    splits = solve_splits(profile, devices, "horizontal", profile.n_units, stream_scaled=True)
    per = CIFAR / clients
    tl_flops = sum(sum(u.train_flops for u in profile.units[:s - 1]) * per for s in splits)
    tl_bytes = sum((2 * profile.units[s - 2].output_bytes + 8) * per for s in splits)
    tl_params = max(sum(u.params for u in profile.units[:s - 1]) for s in splits)
    model_bytes = sum(u.param_bytes for u in profile.units)
    fl_flops = sum(u.train_flops for u in profile.units) * CIFAR
    return {"Tree Learning": {"gflops": tl_flops / 1e9, "mb": tl_bytes / 2 ** 20, "params": float(tl_params)},
            "Federated Learning": {"gflops": fl_flops / 1e9, "mb": 2 * model_bytes * clients / 2 ** 20,
                                   "params": float(sum(u.params for u in profile.units))},
            "_splits": {"client_units": float(max(s - 1 for s in splits))}}


def as_dict(row: SpeedupRow) -> dict[str, Any]:
    return {"model": row.model, "mode": row.mode, "clients": row.clients, **row.times, "ratio": row.ratio,
            "splits": list(row.splits)}
