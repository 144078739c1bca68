"""Tree Learning's cost model (thesis §3.4, Eq. 3.1-3.4): when the merged stream leaves the last layer.

Layers (partition units) are numbered 1..N. Client i with split layer s_i runs layers 1..s_i-1 and
uploads the feature map of layer s_i-1; the server runs s_i..N. Its arrival at layer s_i is

    a_i = sum_{k<s_i} Q^k / V_i + F^{s_i-1} / B_i                                   (Eq. 3.3 / 3.4 term)

t^k is the latest arrival among the clients whose split is k (Eq. 3.3; Eq. 3.4 for k=2). The input of
server layer k is complete at T^k = max(t^k, T^{k-1} + Q^{k-1}/V_s) (Eq. 3.2): the meeting point
waits both for its own clients and for the server stream coming from below. The objective (Eq. 3.1)
is T^L + sum_{k=L..N} Q^k/V_s with L = max_i s_i, the last meeting point: the min over ``last`` in
Eq. 3.1 collapses because ``last`` is fixed by the assignment. This is the thesis's single forward
critical path; it is minimised, clients' parts combine by concatenation at meeting points (one stream).

Two switches (spec 003a A2): ``strict_thesis_recursion`` starts the recursion at layer 2 with t^k = 0
where no client splits (the thesis's x_i^k product), which adds server time for layers no data passes
through; the default starts at m = min_i s_i. ``stream_scaled`` makes server layer k cost n_k·Q^k/V_s,
n_k = number of clients merged by layer k (the thesis uses a constant Q^k).
"""
from __future__ import annotations

from collections.abc import Sequence
import math
import numbers
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, ResourceError
from fedcore.settings import setting
from fedcore_treelearning.profiler import ModelProfile


def _positive_floats(instance: object, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
    bad = [(i, v) for i, v in enumerate(value) if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        i, v = bad[0]
        raise ConfigError(f"{type(instance).__name__}.{attribute.name}[{i}]={v!r}: "
                          f"every entry must be a finite number > 0")


def _non_negative_floats(instance: object, attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
    bad = [(i, v) for i, v in enumerate(value) if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)]
    if bad:
        i, v = bad[0]
        raise ConfigError(f"{type(instance).__name__}.{attribute.name}[{i}]={v!r}: "
                          f"every entry must be a finite number >= 0")


def _optional_tuple(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def _floats(value: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else v for v in value)


@attrs.frozen(kw_only=True)
class SplitProblem:
    """One instance of the split-point problem, in the thesis's symbols (one training iteration).

    ``unit_flops`` Q^1..Q^N (FLOPs of one iteration of each layer), ``feature_bytes`` F^1..F^N (bytes of
    each layer's output per iteration; F^N is never sent), ``client_speeds`` V_i (FLOP/s),
    ``client_bandwidths`` B_i (bytes/s), ``server_speed`` V_s (FLOP/s), ``max_splits`` the deepest split
    each client's memory allows (default N), ``client_names`` for messages.
    """

    unit_flops: tuple[float, ...] = attrs.field(converter=_floats, validator=_non_negative_floats)
    feature_bytes: tuple[float, ...] = attrs.field(converter=_floats, validator=_non_negative_floats)
    client_speeds: tuple[float, ...] = attrs.field(converter=_floats, validator=_positive_floats)
    client_bandwidths: tuple[float, ...] = attrs.field(converter=_floats, validator=_positive_floats)
    server_speed: float = setting(kind=float, low=0.0, low_open=True, help="V_s, FLOP/s")
    max_splits: tuple[int, ...] | None = attrs.field(default=None, converter=_optional_tuple)
    client_names: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_tuple)

    def __attrs_post_init__(self) -> None:
        n, c = len(self.unit_flops), len(self.client_speeds)
        if n < 2:
            raise ConfigError(f"SplitProblem.unit_flops has {n} layer(s); a split needs at least 2")
        if len(self.feature_bytes) != n:
            raise ConfigError(f"SplitProblem.feature_bytes has {len(self.feature_bytes)} entries; unit_flops has {n}")
        if c < 1:
            raise ConfigError("SplitProblem.client_speeds is empty; at least one client is needed")
        for field in ("client_bandwidths", "max_splits", "client_names"):
            value = getattr(self, field)
            if value is not None and len(value) != c:
                raise ConfigError(f"SplitProblem.{field} has {len(value)} entries; client_speeds has {c} clients")
        for i, cap in enumerate(self.max_splits or ()):
            if isinstance(cap, bool) or not isinstance(cap, int) or not 2 <= cap <= n:
                raise ConfigError(f"SplitProblem.max_splits[{i}]={cap!r} must be an int in 2..{n}")

    @property
    def n_layers(self) -> int:
        return len(self.unit_flops)

    @property
    def n_clients(self) -> int:
        return len(self.client_speeds)

    def client_name(self, i: int) -> str:
        return self.client_names[i] if self.client_names else f"client {i}"

    def max_split(self, i: int) -> int:
        return self.max_splits[i] if self.max_splits else self.n_layers

    def check_split(self, i: int, split: int) -> None:
        """One clear error for a split outside the model or beyond what the client's memory holds."""
        n = self.n_layers
        if isinstance(split, bool) or not isinstance(split, numbers.Integral) or not 2 <= split <= n:
            raise ConfigError(f"split {split!r} of {self.client_name(i)} is outside the model: with {n} layers a split "
                              f"is an int in 2..{n} (layers 1..split-1 on the client, Eq. 3.5)")
        if split > self.max_split(i):
            raise ResourceError(f"split {split} of {self.client_name(i)} does not fit its memory: at most "
                                f"{self.max_split(i)} (layers 1..{self.max_split(i) - 1} on the client)")

    def arrival(self, i: int, split: int) -> float:
        """a_i: client compute of layers 1..split-1 plus the upload of F^{split-1} (the Eq. 3.3 term)."""
        compute = sum(self.unit_flops[:split - 1]) / self.client_speeds[i]
        return compute + self.feature_bytes[split - 2] / self.client_bandwidths[i]

    @classmethod
    def from_devices(cls, profile: ModelProfile, devices: Sequence[DeviceProfile], *, server_flops: float,
                     batch_size: int, optimizer_slots: int = 1) -> SplitProblem:
        """The problem for real clients: Q^k = (forward+backward FLOPs per sample) x batch, F^k = output bytes x
        batch, V_i = ``device.flops``, B_i = ``device.up_bps`` / 8 (the forward upload of Eq. 3.3), and each
        client's deepest split from its memory (weights, gradients, ``optimizer_slots`` states, activations)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be an int >= 1")
        if not devices:
            raise ConfigError("devices is empty; give one DeviceProfile per client")
        caps, names = [], []
        for i, device in enumerate(devices):
            name = f"client {i} (profile {device.name!r})"
            need = profile.client_memory_bytes(2, batch_size=batch_size, optimizer_slots=optimizer_slots)
            if need > device.memory_bytes:
                raise ResourceError(
                    f"{name} cannot hold even the smallest client part (unit 1 {profile.units[0].name!r} of a "
                    f"{profile.model_type}, batch {batch_size}): it needs {need} bytes, the device has "
                    f"{device.memory_bytes} bytes")
            cap = max(s for s in range(2, profile.n_units + 1) if profile.client_memory_bytes(
                s, batch_size=batch_size, optimizer_slots=optimizer_slots) <= device.memory_bytes)
            caps.append(cap)
            names.append(name)
        return cls(unit_flops=[u.train_flops * batch_size for u in profile.units],
                   feature_bytes=[u.output_bytes * batch_size for u in profile.units],
                   client_speeds=[d.flops for d in devices], client_bandwidths=[d.up_bps / 8 for d in devices],
                   server_speed=float(server_flops), max_splits=tuple(caps), client_names=tuple(names))


def tree_time(problem: SplitProblem, splits: Sequence[int], *, clients: Sequence[int] | None = None,
              strict_thesis_recursion: bool = False, stream_scaled: bool = False) -> float:
    """T(s), Eq. 3.1-3.4, for the split layers ``splits`` of ``clients`` (default: every client, in order).

    A subset of clients gives a lower bound of the full time (every term only grows when a client is added);
    the branch and bound relies on it. The recursion runs on to layer N+1, so T^{N+1} equals Eq. 3.1's
    T^L + sum_{k=L..N} Q^k/V_s and is computed by the same float operations whatever L is.
    """
    clients = range(problem.n_clients) if clients is None else clients
    if len(splits) != len(clients):
        raise ConfigError(f"{len(splits)} split(s) given for {len(clients)} client(s); "
                          f"give one split per client (Eq. 3.6)")
    if len(splits) == 0:
        return 0.0
    n = problem.n_layers
    meeting = [-math.inf] * (n + 2)  # t^k, indexed by layer k
    merged = [0] * (n + 2)  # clients whose stream has joined by layer k
    for i, s in zip(clients, splits):
        problem.check_split(i, s)
        meeting[s] = max(meeting[s], problem.arrival(i, s))
        merged[s] += 1
    for k in range(1, n + 2):
        merged[k] += merged[k - 1]
    first = 2 if strict_thesis_recursion else min(splits)
    if strict_thesis_recursion:
        meeting = [0.0 if t == -math.inf and k <= max(splits) else t for k, t in enumerate(meeting)]
    total = meeting[first]  # Eq. 3.4 (strict) or T^m = t^m
    for k in range(first + 1, n + 2):  # Eq. 3.2, continued past L through the merged layers (Eq. 3.1)
        server = problem.unit_flops[k - 2] / problem.server_speed
        if stream_scaled:
            server *= merged[k - 1]
        total = max(meeting[k], total + server)
    return total
