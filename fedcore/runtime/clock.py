"""The simulated clock: a job's virtual seconds on its client's device, from measured work.

    duration = compute + communication
    compute  = (train_samples · train_flops + eval_samples · forward_flops) / (profile.flops · efficiency)
               × a seeded log-normal jitter when the profile has one
    communication = 8·bytes_down / down_bps + 8·bytes_up / up_bps + messages · latency_s

FLOPs per sample come from the cost model (measured once per share shape); the sample counts from
the job's own meter; the bytes from the job's channel, i.e. the network ledger. The engine keeps
the event heap and virtual ``now``; this class only prices jobs, checks memory and reports the
per-round compute/communication split.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
import weakref

import torch

from fedcore.data.arrays import batches
from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator
from fedcore.runtime.cost_model import CostModel, ResourceError, ShareCost
from fedcore.runtime.profiles import DeviceProfile, load_profiles, presets
from fedcore.types import ClientInfo, Share

if TYPE_CHECKING:
    from fedcore.contexts import RunContext
    from fedcore.engine.client_job import JobResult
    from fedcore.pipeline import Pipeline

_CLOCKS: weakref.WeakKeyDictionary[Any, SimClock] = weakref.WeakKeyDictionary()

OPTIMIZER_SLOTS = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2, "adan": 4}


@runtime_checkable
class Clock(Protocol):
    """Turns a finished job into virtual seconds on its client's device; what the engine calls.

    ``duration`` is required. The rest is optional and a no-op in :class:`ClockBase`: ``duration_at_dispatch``
    to price a job before it runs (``None``: price the finished job), ``bind`` once after
    set-up, ``admit`` before a job runs (raise to refuse a share that does not fit), ``availability`` for
    seeded faults, ``collect`` for per-round history columns, ``state_dict``/``load_state_dict`` for
    checkpoints. An object that does not subclass :class:`ClockBase` still works: the engine adapts it
    once at set-up (:func:`fedcore.engine.policies.adapt_clock`).
    """

    def duration(self, client: ClientInfo, result: JobResult, *, share: Share, round: int) -> float:
        """Virtual seconds of the finished job ``result`` (``round`` is the version it started from)."""

    def duration_at_dispatch(self, client: ClientInfo, *, share: Share, round: int) -> float | None:
        """Virtual seconds of a job priced before it runs, or ``None`` (then :meth:`duration` prices the finished
        job). A number is used for the job under every executor, and lets a parallel executor (Ray) run every job
        in flight at once, since the arrival order is known before any result (docs/runtime.md)."""

    def bind(self, run: RunContext, pipeline: Pipeline) -> None:
        """Called once after partitioning, before the first round."""

    def admit(self, client: ClientInfo, share: Share) -> None:
        """Raise to refuse a share before the job runs (memory)."""

    def availability(self, client: ClientInfo) -> float:
        """The probability the client is online (feeds ``fedcore.runtime.Faults``)."""

    def collect(self) -> dict[str, float]:
        """History columns for the jobs priced since the last call."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the clock."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` in a resumed run."""


class ClockBase:
    """Base class of clocks: every optional member of :class:`Clock` as a no-op; subclasses price jobs."""

    def duration(self, client: ClientInfo, result: JobResult, *, share: Share, round: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement duration()")

    def duration_at_dispatch(self, client: ClientInfo, *, share: Share, round: int) -> float | None:
        return None

    def bind(self, run: RunContext, pipeline: Pipeline) -> None:
        pass

    def admit(self, client: ClientInfo, share: Share) -> None:
        pass

    def availability(self, client: ClientInfo) -> float:
        return 1.0

    def collect(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def clock_of(run: RunContext | None) -> SimClock | None:
    """The clock of a running engine, for methods that size a share to the device (``clock.fits``)."""
    return _CLOCKS.get(run) if run is not None else None


def optimizer_slots_of(local_update: Any) -> int:
    """State tensors per trainable parameter of a local-update component (SGD 0/1, Adam 2, Adan 4)."""
    name = str(getattr(local_update, "optimizer", "adam")).lower()
    if name == "sgd" and float(getattr(local_update, "momentum", 0.0) or 0.0) > 0:
        name = "sgd-momentum"
    return OPTIMIZER_SLOTS.get(name, 2)


class SimClock(ClockBase):
    """Virtual time per job on device profiles (see module docstring).

    ``profiles``: a mapping name -> :class:`DeviceProfile`, a TOML path/text, or ``None`` for the
    presets. ``default_profile`` is used for clients the run gave no profile. ``efficiency`` is the
    fraction of the profile's throughput training achieves. ``batch_size`` and ``optimizer_slots``
    feed the memory check and default to the local-update component's settings.
    """

    def __init__(self, profiles: Mapping[str, DeviceProfile] | str | Path | None = None, *,
                 default_profile: str | None = None, efficiency: float = 1.0, batch_size: int | None = None,
                 optimizer_slots: int | None = None, check_memory: bool = True, example_samples: int = 2) -> None:
        if profiles is None:
            table = presets()
        elif isinstance(profiles, Mapping):
            table = dict(profiles)
            bad = [k for k, v in table.items() if not isinstance(v, DeviceProfile)]
            if bad:
                raise ConfigError(f"SimClock(profiles=...): values for {bad} are not DeviceProfile objects")
        else:
            table = load_profiles(profiles)
        if not 0 < efficiency <= 1:
            raise ConfigError(f"SimClock.efficiency={efficiency}; must be in (0, 1]")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"SimClock.batch_size={batch_size}; must be >= 1")
        if optimizer_slots is not None and optimizer_slots < 0:
            raise ConfigError(f"SimClock.optimizer_slots={optimizer_slots}; must be >= 0")
        if default_profile is not None and default_profile not in table:
            raise ConfigError(f"SimClock.default_profile={default_profile!r} is not a known profile; "
                              f"choose one of: {', '.join(sorted(table))}")
        self.profiles = table
        self.default_profile = default_profile
        self.efficiency = efficiency
        self.batch_size = batch_size
        self.optimizer_slots = optimizer_slots
        self.check_memory = check_memory
        self.example_samples = max(1, example_samples)
        self.model = CostModel()
        self._run: RunContext | None = None
        self._examples: dict[tuple[int, ...], torch.Tensor] = {}
        self._round: dict[str, float] = {}

    # -- engine hooks ---------------------------------------------------------------------

    def bind(self, run: RunContext, pipeline: Pipeline) -> None:
        """Check every client has a known profile and read the memory-model settings from the pipeline."""
        missing = [c.id for c in run.clients if (c.profile or self.default_profile) is None]
        if missing:
            raise ConfigError(f"clients {missing[:10]} have no device profile; pass profiles=[...] or a "
                              f"ProfileAssignment to run(), or SimClock(default_profile=...)")
        unknown = sorted({c.profile for c in run.clients if c.profile is not None and c.profile not in self.profiles})
        if unknown:
            raise ConfigError(f"unknown device profile(s) {unknown}; known: {', '.join(sorted(self.profiles))} "
                              f"(define your own with fedcore.runtime.load_profiles)")
        update = pipeline.provider("local_update")
        if self.batch_size is None:
            self.batch_size = int(getattr(update, "batch_size", 32))
        if self.optimizer_slots is None:
            self.optimizer_slots = optimizer_slots_of(update)
        self._run = run
        self._examples.clear()
        _CLOCKS[run] = self

    def profile_of(self, client: ClientInfo) -> DeviceProfile:
        name = client.profile or self.default_profile
        if name is None or name not in self.profiles:
            raise ConfigError(f"client {client.id} has profile {name!r}; known: {', '.join(sorted(self.profiles))}")
        return self.profiles[name]

    def availability(self, client: ClientInfo) -> float:
        return self.profile_of(client).availability

    def cost(self, client: ClientInfo, share: Share) -> ShareCost:
        return self.model.cost(share, self.example(client))

    def example(self, client: ClientInfo) -> torch.Tensor:
        """The cost model's probe: the first ``example_samples`` of the client's own training inputs."""
        return self._example(client)

    def memory_needed(self, client: ClientInfo, share: Share) -> dict[str, int]:
        return self.cost(client, share).memory_breakdown(batch_size=self.batch_size or 32,
                                                         optimizer_slots=self.optimizer_slots or 0)

    def fits(self, client: ClientInfo, share: Share) -> bool:
        return sum(self.memory_needed(client, share).values()) <= self.profile_of(client).memory_bytes

    def admit(self, client: ClientInfo, share: Share) -> None:
        """Refuse a share that does not fit the client's memory, before it runs."""
        if not self.check_memory:
            return
        parts = self.memory_needed(client, share)
        need, profile = sum(parts.values()), self.profile_of(client)
        if need > profile.memory_bytes:
            detail = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items())
            raise ResourceError(
                f"client {client.id} (profile {profile.name!r}, {profile.memory_bytes / 2**20:.0f} MiB) cannot train "
                f"its share: it needs {need / 2**20:.1f} MiB ({detail}; batch {self.batch_size}, "
                f"{self.optimizer_slots} optimizer slots). Give this client a smaller share (a split that reads "
                f"fedcore.runtime.clock_of(ctx.run).fits(client, share)), a smaller batch, or a larger profile")

    def duration(self, client: ClientInfo, result: Any, *, share: Share, round: int) -> float:
        profile = self.profile_of(client)
        cost = self.cost(client, share)
        work = dict(getattr(result, "work", {}) or {})
        train, infer = work.get("train_samples", 0), work.get("eval_samples", 0)
        if train == 0 and infer == 0 and result.update is not None:  # the update never called the share's forward
            train = result.update.num_examples
        flops = train * cost.train_flops + infer * cost.forward_flops
        compute = flops / (profile.flops * self.efficiency)
        if profile.jitter > 0:
            compute *= float(numpy_generator(self._seed(), "jitter", round, client.id).lognormal(0.0, profile.jitter))
        down = sum(r.nbytes for r in result.rows if r.direction == "down")
        up = sum(r.nbytes for r in result.rows if r.direction == "up")
        messages = sum(r.messages for r in result.rows)  # a dry run books n equal messages as one row
        comm = 8.0 * down / profile.down_bps + 8.0 * up / profile.up_bps + messages * profile.latency_s
        for key, value in (("compute_s", compute), ("comm_s", comm), ("flops", flops)):
            self._round[key] = self._round.get(key, 0.0) + value
        return compute + comm

    def collect(self) -> dict[str, float]:
        """Virtual compute/communication seconds and FLOPs of the jobs priced since the last call."""
        out = {f"virtual_{k}": float(v) for k, v in self._round.items()}
        self._round = {}
        return out

    # -- helpers --------------------------------------------------------------------------

    def _seed(self) -> int:
        return int(self._run.seed) if self._run is not None else 0

    def _example(self, client: ClientInfo) -> torch.Tensor:
        """A small batch of the client's own training inputs (the cost model's probe)."""
        if self._run is None or self._run.partition is None:
            raise ConfigError("SimClock is not bound to a run; the engine calls bind() after set-up")
        idx = tuple(self._run.partition.train[client.id][: self.example_samples])
        x, _ = next(iter(batches(self._run.train, idx, len(idx), shuffle=False)))
        shape = tuple(x.shape[1:])
        # one probe per input shape keeps the cache key stable across clients
        return self._examples.setdefault(shape, x)
