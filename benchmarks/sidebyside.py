"""Side by side on a shared machine: contenders interleaved, one ratio per pair, the load and the machine printed.

    from sidebyside import Target, interleave

    runs = interleave({"inline": run_inline, "threads": run_threads}, reps=5, warmup=1)
    runs.print_header("threads executor vs inline, digits job")
    runs.print_times()
    runs.print_ratio("inline", "threads", target=Target(">=", 1.7))    # inline / threads, per pair

A contender is a callable that runs once and returns its measurement: seconds (a float) or a dict of named
measures (``{"wall": ..., "cpu": ...}``, chosen with ``key=``). :func:`interleave` runs the contenders in turn, in
the listed order and then reversed (A B, B A, A B, ...), so neither always goes first; the i-th run of each contender
forms pair i, and a ratio is taken within each pair, so a load spike from another user of the machine lands on both
sides of the same ratio. The minimum and median of the per-pair ratios are printed, with the target (what
``benchmarks/README.md`` states) judged on the median, the load average before every pair and the machine.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import gc
import os
import platform
import statistics
import sys
import time
from typing import Any

import attrs

Measure = float | Mapping[str, float]


@attrs.frozen
class Target:
    """A ratio the README asks for: ``Target(">=", 1.7)`` (a speed-up) or ``Target("<=", 1.05)`` (an overhead)."""

    op: str = attrs.field(validator=attrs.validators.in_((">=", "<=")))
    value: float

    def met(self, ratio: float) -> bool:
        return ratio >= self.value if self.op == ">=" else ratio <= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}x"


def machine() -> str:
    """``2 CPUs (x86_64, <model>), Python 3.11.9, torch 2.14.1``: what the figures were measured on."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    parts = [f"{os.cpu_count()} CPUs ({platform.machine()}{', ' + model if model else ''})",
             f"Python {platform.python_version()}"]
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {torch.__version__}")
    return ", ".join(parts)


def load_average() -> float:
    """The 1-minute load average (``nan`` where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


@attrs.define
class Runs:
    """Every contender's measurements in run order (pair i = the i-th of each) and the load before each pair."""

    names: list[str]
    results: dict[str, list[Measure]]
    loads: list[float]
    wall_s: float = 0.0

    def values(self, name: str, key: str | None = None) -> list[float]:
        """One contender's measurements (``key``: which measure of a dict)."""
        out = []
        for m in self.results[name]:
            if isinstance(m, Mapping):
                if key is None:
                    raise KeyError(f"{name} measures {sorted(m)}: name one with key=")
                out.append(float(m[key]))
            else:
                out.append(float(m))
        return out

    def ratios(self, numerator: str, denominator: str, key: str | None = None) -> list[float]:
        """``numerator / denominator`` within each pair."""
        return [a / b for a, b in zip(self.values(numerator, key), self.values(denominator, key))]

    def print_header(self, title: str, **settings: Any) -> None:
        """The title, the settings, the machine, the load around the runs, how they were interleaved."""
        print(title)
        if settings:
            print("  " + ", ".join(f"{k} {v}" for k, v in settings.items()))
        reps = len(self.loads)
        print(f"  machine: {machine()}")
        print(f"  load average (1 min) before each pair: first {self.loads[0]:.2f}, max {max(self.loads):.2f}, last "
              f"{self.loads[-1]:.2f}; after {load_average():.2f}")
        print(f"  {reps} pairs, contenders interleaved ({' '.join(self.names)} / reversed, alternately), "
              f"{self.wall_s:.0f} s in all")

    def print_times(self, key: str | None = None, unit: str = "s", names: list[str] | None = None) -> None:
        """Minimum and median of each contender's measure (``names``: of these contenders only)."""
        label = key or "measure"
        for name in names or self.names:
            v = self.values(name, key)
            print(f"  {name:<28} {label}: min {min(v):.4f} {unit}, median {statistics.median(v):.4f} {unit}")

    def print_ratio(self, numerator: str, denominator: str, *, key: str | None = None, target: Target | None = None,
                    label: str | None = None) -> tuple[float, float]:
        """``numerator / denominator`` per pair: minimum and median, and the target judged on the median."""
        r = self.ratios(numerator, denominator, key)
        low, mid = min(r), statistics.median(r)
        text = f"  RATIO {label or f'{numerator} / {denominator}'}{f' ({key})' if key else ''}: min {low:.3f}x, " \
               f"median {mid:.3f}x over {len(r)} pairs"
        if target is not None:
            text += f"; target {target}: {'met' if target.met(mid) else 'MISSED'} (median)"
        print(text)
        return low, mid


def interleave(contenders: Mapping[str, Callable[[], Measure]], *, reps: int, warmup: int = 0,
               collect: bool = True) -> Runs:
    """Run every contender ``warmup`` times untimed, then ``reps`` times each: A B, B A, A B, ...

    ``collect`` runs Python's garbage collector before each run, outside the contender's clock: in a process
    holding torch, timm and peft a full collection takes ~0.3 s of CPU on the 2-core machine, and one landing
    inside a short run, on either side at random, doubled that run's time per round.
    """
    if reps < 1:
        raise ValueError(f"reps = {reps}; must be >= 1")
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    results: dict[str, list[Measure]] = {name: [] for name in names}
    loads = []
    start = time.perf_counter()
    for rep in range(reps):
        loads.append(load_average())
        for name in names if rep % 2 == 0 else names[::-1]:
            if collect:
                gc.collect()
            results[name].append(contenders[name]())
    return Runs(names=names, results=results, loads=loads, wall_s=time.perf_counter() - start)


__all__ = ["Runs", "Target", "interleave", "load_average", "machine"]
