"""Simulated time of one training pass on device profiles: a discrete-event model of SL and TL (spec 003a A3).

Resources: one compute lane per client, one uplink and one downlink per client, one server lane. Per
iteration t and client i (b = batch, f_i = the client's share of the features, 1 in horizontal mode):

    CF(i,t) = client forward  = sum_{k<s_i} fwd_k * b * f_i / V_i
    UP(i,t) = (F^{s_i-1} * b * f_i + labels) * 8 / up_bps + latency
    SRV(t)  = server forward in tree order (layer k starts when its meeting point is complete; its work is
              fwd_k * b * merged share), then backward; client i's gradient is ready when the backward
              has passed layer s_i
    DN(i,t) = F^{s_i-1} * b * f_i * 8 / down_bps + latency
    CB(i,t) = client backward = sum_{k<s_i} bwd_k * b * f_i / V_i

Schedules: ``sync`` (CF(t+1) after CB(t): SL with synchronous aggregation, TL with optimal split only),
``pipelined`` (client lane CF(1) CB(1) CF(2) CF(3) CB(2) CF(4) CB(3) ..., staleness 1, the first iteration
synchronous, the last gradient flushed; uploads overlap the client's backward) and ``round-robin`` (SL: one
client at a time through its whole shard, the client part relayed through the server between turns). The
server takes batches in order. Measured FLOPs and bytes come from :func:`~fedcore_treelearning.profile_model`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile
from fedcore_treelearning.profiler import ModelProfile
from fedcore_treelearning.tree import HORIZONTAL, concat_dim

SCHEDULES = ("sync", "pipelined", "round-robin")
LABEL_BYTES = 8  # int64 label per sample, sent up with the activation in horizontal mode


@attrs.frozen(kw_only=True)
class PassTime:
    """Simulated seconds of one pass: ``total`` (the makespan), and the busy time of each kind of lane."""

    total: float
    client_compute: float
    server_compute: float
    communication: float


def _check(profile: ModelProfile, devices: Sequence[DeviceProfile], splits: Sequence[int], batches: Sequence[int],
           schedule: str, mode: str) -> None:
    concat_dim(mode)
    if schedule not in SCHEDULES:
        raise ConfigError(f"schedule={schedule!r}; choose one of: {', '.join(SCHEDULES)}")
    if not (len(devices) == len(splits) == len(batches)) or not devices:
        raise ConfigError(f"give one device, split and batch count per client (got {len(devices)}, {len(splits)}, "
                          f"{len(batches)})")
    for i, s in enumerate(splits):
        if not 2 <= s <= profile.n_units:
            raise ConfigError(f"split {s} of client {i} is outside the model: 2..{profile.n_units}")


def pass_time(profile: ModelProfile, devices: Sequence[DeviceProfile], splits: Sequence[int], *,
              batches: Sequence[int], batch_size: int, server_flops: float, schedule: str, mode: str = HORIZONTAL,
              fractions: Sequence[float] | None = None) -> PassTime:
    """Simulated time for client i to run ``batches[i]`` iterations of ``batch_size`` under ``schedule``."""
    _check(profile, devices, splits, batches, schedule, mode)
    c = len(devices)
    frac = list(fractions) if fractions is not None else [1.0] * c
    units = profile.units
    b = batch_size
    cf = [sum(u.forward_flops for u in units[:s - 1]) * b * f / d.flops for s, f, d in zip(splits, frac, devices)]
    cb = [sum(u.backward_flops for u in units[:s - 1]) * b * f / d.flops for s, f, d in zip(splits, frac, devices)]
    act = [units[s - 2].output_bytes * b * f for s, f in zip(splits, frac)]
    labels = LABEL_BYTES * b if mode == HORIZONTAL else 0
    up = [8 * (a + labels) / d.up_bps + d.latency_s for a, d in zip(act, devices)]
    dn = [8 * a / d.down_bps + d.latency_s for a, d in zip(act, devices)]
    busy = {"client": 0.0, "server": 0.0, "comm": 0.0}

    trees: dict[tuple[int, ...], list[tuple[int, list[int], float, float]]] = {}

    def tree(present: tuple[int, ...]) -> list[tuple[int, list[int], float, float]]:
        """Per server layer from the first meeting point: (k, clients joining, forward s, backward s)."""
        if present not in trees:
            merged, layers = 0.0, []
            for k in range(min(splits[i] for i in present), profile.n_units + 1):
                joining = [i for i in present if splits[i] == k]
                merged += sum(frac[i] for i in joining)
                layers.append((k, joining, units[k - 1].forward_flops * b * merged / server_flops,
                               units[k - 1].backward_flops * b * merged / server_flops))
            trees[present] = layers
        return trees[present]

    def server(present: Sequence[int], start: float, arrivals: Mapping[int, float]) -> tuple[float, dict[int, float]]:
        """Server forward (tree order) then backward for the clients ``present``; when each gradient is ready."""
        layers = tree(tuple(present))
        t = start
        for _, joining, fwd, _ in layers:
            for i in joining:
                t = max(t, arrivals[i])
            t += fwd
        ready = {}
        for _, joining, _, bwd in reversed(layers):
            t += bwd
            for i in joining:
                ready[i] = t
        busy["server"] += sum(f + w for _, _, f, w in layers)
        return t, ready

    if schedule == "round-robin":
        now = 0.0
        for i in range(c):
            for _ in range(batches[i]):
                now += cf[i] + up[i]
                end, ready = server([i], now, {i: now})
                now = end + dn[i] + cb[i]
                busy["client"] += cf[i] + cb[i]
                busy["comm"] += up[i] + dn[i]
            relay = sum(u.param_bytes for u in units[:splits[i] - 1]) * 8
            now += relay / devices[i].up_bps + relay / devices[(i + 1) % c].down_bps  # hand the client part on
            busy["comm"] += relay / devices[i].up_bps + relay / devices[(i + 1) % c].down_bps
        return PassTime(total=now, client_compute=busy["client"], server_compute=busy["server"],
                        communication=busy["comm"])

    lane = [0.0] * c      # client compute lane free at
    uplink = [0.0] * c
    downlink = [0.0] * c
    pending: dict[int, float] = {}  # client -> when the gradient it has not applied yet arrived (pipelined)
    srv = 0.0
    finish = 0.0
    for t in range(max(batches)):
        present = [i for i in range(c) if t < batches[i]]
        arrivals = {}
        for i in present:
            lane[i] += cf[i]
            busy["client"] += cf[i]
            uplink[i] = max(uplink[i], lane[i]) + up[i]
            busy["comm"] += up[i]
            arrivals[i] = uplink[i]
            if schedule == "pipelined" and i in pending:  # CB(t-1) after CF(t), overlapping UP(t)
                lane[i] = max(lane[i], pending.pop(i)) + cb[i]
                busy["client"] += cb[i]
        srv, ready = server(present, srv, arrivals)
        for i in present:
            downlink[i] = max(downlink[i], ready[i]) + dn[i]
            busy["comm"] += dn[i]
            if schedule == "sync" or t == 0:
                lane[i] = max(lane[i], downlink[i]) + cb[i]
                busy["client"] += cb[i]
            else:
                pending[i] = downlink[i]
    for i, arrived in pending.items():  # flush the last gradient
        lane[i] = max(lane[i], arrived) + cb[i]
        busy["client"] += cb[i]
    finish = max(lane + [srv])
    return PassTime(total=finish, client_compute=busy["client"], server_compute=busy["server"],
                    communication=busy["comm"])
