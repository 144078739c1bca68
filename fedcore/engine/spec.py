"""One run's inputs as one record: what :meth:`fedcore.Pipeline.run` and ``fedcore run`` hand the engine."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.runtime.placement import Placement


@attrs.frozen(kw_only=True, eq=False)
class RunSpec:
    """The model, data and run settings of one run, plus the runtime pieces (executor, clock, faults, checkpoints).

    ``device`` (``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"``; ``None`` leaves the model and data where they
    are) and ``precision`` (``"fp32" | "bf16" | "fp16"``) say where and how client work computes
    (:mod:`fedcore.runtime.placement`). ``profiles`` is a list of profile names (one per client) or a seeded
    rule with ``assign(n, seed=)``
    (``fedcore.runtime.ProfileAssignment``); ``on_round`` receives every finished history row.
    ``client_metrics``: each row also carries ``client_metrics``, one entry per aggregated update with every
    numeric metric its local update reported (``fedcore run`` writes them to ``client_metrics.jsonl``).
    """

    model: Any
    train: Any
    test: Any = None
    num_clients: int
    rounds: int
    seed: int = 0
    eval_every: int = 1
    executor: Any = None
    clock: Any = None
    profiles: Sequence[str | None] | Any | None = None
    out_dir: Any = None
    on_round: Callable[[dict[str, Any]], None] | None = None
    faults: Any = None
    checkpoint: Any = None
    device: Any = None
    precision: str = "fp32"
    client_metrics: bool = False
    update_norm_bound: float = 0.0
    """Reject an update whose delta norm exceeds this many times the round's median (0 = off; update_norms.py)."""

    def __attrs_post_init__(self) -> None:
        if self.num_clients < 1:
            raise ConfigError(f"num_clients={self.num_clients}; must be >= 1")
        if self.rounds < 0:
            raise ConfigError(f"rounds={self.rounds}; must be >= 0")
        if self.eval_every < 1:
            raise ConfigError(f"eval_every={self.eval_every}; must be >= 1")
        if not 0 <= self.update_norm_bound < float("inf"):
            raise ConfigError(f"update_norm_bound={self.update_norm_bound}; must be a finite number >= 0 (0 = off)")
        if len(self.train) < self.num_clients:
            raise ConfigError(f"num_clients={self.num_clients} is more than the {len(self.train)} training samples")

    def placement(self, components: Iterable[Any] = ()) -> Placement:
        """The checked device and precision (``device=None``: the device the model's parameters are on) for a
        pipeline of ``components``."""
        device = self.device
        if device is None:
            first = next(iter(self.model.parameters()), None) if hasattr(self.model, "parameters") else None
            device = first.device if first is not None else "cpu"
        return Placement.resolve(device=device, precision=self.precision, components=components)

    def client_profiles(self) -> list[str | None] | None:
        """One profile name per client (a seeded rule is applied here), or ``None``."""
        profiles = self.profiles
        if profiles is None:
            return None
        if hasattr(profiles, "assign"):  # a seeded rule (fedcore.runtime.ProfileAssignment)
            profiles = list(profiles.assign(self.num_clients, seed=self.seed))
        if len(profiles) != self.num_clients:
            raise ConfigError(f"profiles has {len(profiles)} entries for num_clients={self.num_clients}")
        return list(profiles)
