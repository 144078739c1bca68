"""Device profiles: compute throughput, link bandwidths, memory and availability of a client device.

Named presets carry their source. Users add their own in TOML (``load_profiles``) and assign
profiles to clients with a fixed name, a list, or a seeded rule (``ProfileAssignment``).

Units: ``flops`` in FLOP/s (fp32 training throughput), bandwidths in bit/s, memory in bytes,
latency in seconds per message, ``jitter`` the sigma of a log-normal factor on compute time.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator
from fedcore.settings import setting

GB = 1024 ** 3
MBPS = 1e6


@attrs.frozen(kw_only=True)
class DeviceProfile:
    """One device class. Every rate and capacity must be positive: the clock divides by them."""

    name: str = setting(kind=str)
    flops: float = setting(kind=float, low=0.0, low_open=True, help="training throughput, FLOP/s")
    up_bps: float = setting(kind=float, low=0.0, low_open=True, help="upload bandwidth, bit/s")
    down_bps: float = setting(kind=float, low=0.0, low_open=True, help="download bandwidth, bit/s")
    memory_bytes: int = setting(kind=int, low=0, low_open=True, help="memory available for training, bytes")
    availability: float = setting(1.0, low=0.0, high=1.0, low_open=True, help="P(online when dispatched)")
    latency_s: float = setting(0.0, low=0.0, help="fixed cost per message, seconds")
    jitter: float = setting(0.0, low=0.0, help="sigma of a log-normal factor on compute time")
    source: str = setting("user-defined", kind=str)

    def scaled(self, *, speed: float = 1.0, bandwidth: float = 1.0, name: str | None = None) -> DeviceProfile:
        """The same device ``speed`` times faster (compute) and ``bandwidth`` times faster (links)."""
        if speed <= 0 or bandwidth <= 0:
            raise ConfigError(f"scaled(speed={speed}, bandwidth={bandwidth}): both must be > 0")
        return attrs.evolve(self, name=name or self.name, flops=self.flops * speed, up_bps=self.up_bps * bandwidth,
                            down_bps=self.down_bps * bandwidth)


def _p(name: str, *, tflops: float, up_mbps: float, down_mbps: float, memory_gb: float, source: str,
       **extra: Any) -> DeviceProfile:
    return DeviceProfile(name=name, flops=tflops * 1e12, up_bps=up_mbps * MBPS, down_bps=down_mbps * MBPS,
                         memory_bytes=int(memory_gb * GB), source=source, **extra)


# Jetson GPUs, fp32 peak = CUDA cores x 2 FLOP x max GPU clock (NVIDIA module data sheets):
# Xavier NX 384 x 2 x 1.1 GHz = 0.845 TFLOP/s; AGX Orin 64GB 2048 x 2 x 1.3 GHz = 5.32 TFLOP/s (ratio 6.3).
XAVIER_NX_FP32 = 0.845
JETSON_DEFAULT_RATIO = 5.32 / 0.845
JETSON_NETWORK = "bandwidth not given by the paper; 100 Mbit/s both ways assumed"


def jetson_presets(ratio: float = JETSON_DEFAULT_RATIO) -> dict[str, DeviceProfile]:
    """Co-S2P's testbed (spec 004 §1.2/§4.3, paper Tab. 5): Jetson Xavier NX 8/16 GB, AGX Orin 32/64 GB.

    The paper gives only INT8 TOPS (21/21/200/275), so speed follows the spec's calibration note:
    one scalar ``ratio`` r = AGX64/NX, with AGX32 = r·200/275 and NX16 = NX8. The default r is the
    fp32-peak ratio (6.3), inside the spec's calibrated range (4.2 to 7.4 for E1 to E3); raw TOPS give 13.1.
    """
    if ratio <= 0:
        raise ConfigError(f"jetson_presets(ratio={ratio}): must be > 0")
    src = "Co-S2P Tab. 5 (memory); speed: fp32 peak of the Xavier NX GPU, scaled by the calibration ratio r={:.2f}"
    nx = XAVIER_NX_FP32
    return {
        "jetson-nx8": _p("jetson-nx8", tflops=nx, up_mbps=100, down_mbps=100, memory_gb=8,
                         source=src.format(ratio) + "; " + JETSON_NETWORK),
        "jetson-nx16": _p("jetson-nx16", tflops=nx, up_mbps=100, down_mbps=100, memory_gb=16,
                          source=src.format(ratio) + "; " + JETSON_NETWORK),
        "jetson-agx32": _p("jetson-agx32", tflops=nx * ratio * 200 / 275, up_mbps=100, down_mbps=100, memory_gb=32,
                           source=src.format(ratio) + " x 200/275; " + JETSON_NETWORK),
        "jetson-agx64": _p("jetson-agx64", tflops=nx * ratio, up_mbps=100, down_mbps=100, memory_gb=64,
                           source=src.format(ratio) + "; " + JETSON_NETWORK),
    }


def edge_presets() -> dict[str, DeviceProfile]:
    """Phone / watch / laptop classes (Tree Learning's heterogeneity tiers, PromptFL's phone numbers).

    The phone is the PromptFL chapter's cost-model device (spec 003a §B, thesis Tab. 4.1): 1.5 TFLOP/s,
    54 Mbit/s down, 12 Mbit/s up, 8 GB. Tree Learning (thesis §3.6.3) imitates watch / phone / laptop
    with speed tiers low : medium : high = 1 : 2 : 4 (spec 003a A8), so the watch runs at half and the
    laptop at twice the phone. Watch and laptop links and memory are not given there and are assumed.
    ``tl-low/medium/high`` are the spec's proposed simulation tiers for CPU-sized models: 0.5 / 1 / 2
    GFLOP/s on 20 Mbit/s links (memory assumed).
    """
    tiers = "Tree Learning tiers 1:2:4 (thesis §3.6.3, spec 003a A8)"
    return {
        "phone": _p("phone", tflops=1.5, up_mbps=12, down_mbps=54, memory_gb=8,
                    source="PromptFL chapter Tab. 4.1 (refs [30], [93]; spec 003a §B)"),
        "watch": _p("watch", tflops=0.75, up_mbps=5, down_mbps=20, memory_gb=2,
                    source=f"{tiers}: half the phone; links and 2 GB memory assumed"),
        "laptop": _p("laptop", tflops=3.0, up_mbps=50, down_mbps=100, memory_gb=16,
                     source=f"{tiers}: twice the phone; links and 16 GB memory assumed"),
        "tl-low": _p("tl-low", tflops=0.5e-3, up_mbps=20, down_mbps=20, memory_gb=1,
                     source="spec 003a A8 proposed tier (0.5 GFLOP/s, 20 Mbit/s); memory assumed"),
        "tl-medium": _p("tl-medium", tflops=1e-3, up_mbps=20, down_mbps=20, memory_gb=4,
                        source="spec 003a A8 proposed tier (1 GFLOP/s, 20 Mbit/s); memory assumed"),
        "tl-high": _p("tl-high", tflops=2e-3, up_mbps=20, down_mbps=20, memory_gb=16,
                      source="spec 003a A8 proposed tier (2 GFLOP/s, 20 Mbit/s); memory assumed"),
    }


def presets() -> dict[str, DeviceProfile]:
    """Every named preset: ``phone``, ``watch``, ``laptop``, ``tl-*``, ``jetson-*``."""
    return {**edge_presets(), **jetson_presets()}


# -- TOML -----------------------------------------------------------------------------------

_UNITS: dict[str, tuple[str, float]] = {
    "flops": ("flops", 1.0), "gflops": ("flops", 1e9), "tflops": ("flops", 1e12),
    "up_bps": ("up_bps", 1.0), "up_mbps": ("up_bps", MBPS), "down_bps": ("down_bps", 1.0),
    "down_mbps": ("down_bps", MBPS), "memory_bytes": ("memory_bytes", 1.0), "memory_gb": ("memory_bytes", GB),
    "memory_mb": ("memory_bytes", 1024 ** 2), "latency_s": ("latency_s", 1.0), "latency_ms": ("latency_s", 1e-3),
    "availability": ("availability", 1.0), "jitter": ("jitter", 1.0), "source": ("source", 1.0),
}
_EXTRA = ("base", "speed", "bandwidth")


def profile_from_dict(name: str, table: Mapping[str, Any], known: Mapping[str, DeviceProfile] | None = None
                      ) -> DeviceProfile:
    """A profile from a TOML table: ``{base = "phone", speed = 0.5}`` or explicit fields with units."""
    unknown = sorted(set(table) - set(_UNITS) - set(_EXTRA))
    if unknown:
        allowed = ", ".join(list(_UNITS) + list(_EXTRA))
        raise ConfigError(f"profile {name!r}: unknown key(s) {unknown}; allowed: {allowed}")
    values: dict[str, Any] = {}
    if "base" in table:
        pool = dict(known or presets())
        if table["base"] not in pool:
            raise ConfigError(f"profile {name!r}: base={table['base']!r} is not a known profile; "
                              f"choose one of: {', '.join(sorted(pool))}")
        values = attrs.asdict(pool[table["base"]])
        values["source"] = f"{table['base']} ({values['source']}), modified"
    for key, raw in table.items():
        if key in _EXTRA:
            continue
        field, scale = _UNITS[key]
        if field == "source":
            values[field] = str(raw)
            continue
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"profile {name!r}: {key}={raw!r} must be a number")
        values[field] = int(raw * scale) if field == "memory_bytes" else float(raw) * scale
    values["name"] = name
    missing = [f for f in ("flops", "up_bps", "down_bps", "memory_bytes") if f not in values]
    if missing:
        raise ConfigError(f"profile {name!r} is missing {missing}"
                          f" (give them, or `base = \"phone\"` to start from a preset)")
    try:
        profile = DeviceProfile(**values)
        return profile.scaled(speed=float(table.get("speed", 1.0)), bandwidth=float(table.get("bandwidth", 1.0)))
    except ConfigError as exc:
        raise ConfigError(f"profile {name!r}: {exc}") from None


def load_profiles(source: str | Path | Mapping[str, Any], *, include_presets: bool = True) -> dict[str, DeviceProfile]:
    """Profiles from a TOML file, TOML text or a parsed table with a ``[profiles.<name>]`` section.

    The result includes the presets (unless ``include_presets=False``); a user profile of the same
    name replaces the preset.
    """
    import tomllib

    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        is_path = isinstance(source, Path) or ("\n" not in source and "=" not in source)
        if is_path and not Path(source).is_file():
            raise ConfigError(f"profiles file {str(source)!r} does not exist")
        text = Path(source).read_text() if is_path else str(source)
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"profiles TOML does not parse: {exc}") from None
    tables = doc.get("profiles", doc)
    if not isinstance(tables, Mapping):
        raise ConfigError("profiles TOML needs [profiles.<name>] tables")
    out = dict(presets()) if include_presets else {}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"profile {name!r} must be a table, got {table!r}")
        out[name] = profile_from_dict(name, table, out)
    return out


# -- assigning profiles to clients ----------------------------------------------------------

@attrs.frozen(kw_only=True)
class ProfileAssignment:
    """Which profile each client gets: ``fixed`` name, an explicit ``order`` list, or seeded ``weights``.

    With ``weights`` and ``exact=True`` (default) the counts follow the weights by largest remainder
    (4 watch + 2 phone + 2 laptop for weights 4:2:2 and 8 clients) and a seeded shuffle decides who
    gets which; ``exact=False`` draws each client independently.
    """

    fixed: str | None = None
    order: tuple[str, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    weights: Mapping[str, float] | None = None
    exact: bool = True
    cycle: bool = False

    def __attrs_post_init__(self) -> None:
        given = [x is not None for x in (self.fixed, self.order, self.weights)]
        if sum(given) != 1:
            raise ConfigError("ProfileAssignment needs exactly one of fixed=, order= or weights=")
        if self.weights is not None:
            bad = {k: v for k, v in self.weights.items() if not v >= 0}
            if bad or not sum(self.weights.values()) > 0:
                raise ConfigError(f"ProfileAssignment.weights={dict(self.weights)}:"
                                  " weights must be >= 0 with a positive sum")

    def names(self) -> set[str]:
        if self.fixed is not None:
            return {self.fixed}
        if self.order is not None:
            return set(self.order)
        assert self.weights is not None  # __attrs_post_init__: exactly one of fixed, order, weights
        return {k for k, v in self.weights.items() if v > 0}

    def assign(self, num_clients: int, *, seed: int) -> list[str]:
        if self.fixed is not None:
            return [self.fixed] * num_clients
        if self.order is not None:
            if self.cycle:
                return [self.order[i % len(self.order)] for i in range(num_clients)]
            if len(self.order) != num_clients:
                raise ConfigError(f"ProfileAssignment.order has {len(self.order)} names for {num_clients} clients "
                                  f"(pass cycle=True to repeat it)")
            return list(self.order)
        assert self.weights is not None  # __attrs_post_init__: exactly one of fixed, order, weights
        names = sorted(self.weights)
        w = np.array([float(self.weights[n]) for n in names])
        p = w / w.sum()
        rng = numpy_generator(seed, "profiles")
        if not self.exact:
            return [names[i] for i in rng.choice(len(names), size=num_clients, p=p)]
        raw = p * num_clients
        counts = np.floor(raw).astype(int)
        for i in np.argsort(-(raw - counts), kind="stable")[: num_clients - counts.sum()]:
            counts[i] += 1
        out = [n for n, k in zip(names, counts) for _ in range(int(k))]
        return [out[i] for i in rng.permutation(num_clients)]


def resolve(profiles: Sequence[str | None] | ProfileAssignment | None, num_clients: int, seed: int) -> list[str | None]:
    if profiles is None:
        return [None] * num_clients
    if isinstance(profiles, ProfileAssignment):
        return list(profiles.assign(num_clients, seed=seed))
    return list(profiles)
