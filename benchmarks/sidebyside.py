"""Side-by-side timing on a shared machine: contenders interleaved, per-pair ratios, the load and the machine.

    from sidebyside import interleave, machine, load, ratio_line

    times = interleave({"per-job": run_a, "vectorised": run_b}, reps=5)   # A, B, A, B, ... (each returns seconds)
    print(machine()); print(load())
    print(ratio_line(times["per-job"], times["vectorised"]))              # speed-up: min and median of A_i / B_i

Other jobs on the machine slow whichever contender runs at that moment; running them in turn, rep by rep, and
taking the ratio within each pair keeps a burst of load from landing on one side only. A contender returns a
number (seconds, lower is better) or a dict of them (``{"wall": ..., "cpu": ...}``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import gc
import os
from pathlib import Path
import platform
import statistics
import sys
from typing import Any

Measure = float | Mapping[str, float]


def interleave(contenders: Mapping[str, Callable[[], Measure]], reps: int, *, warmup: bool = True,
               collect: bool = True, on_result: Callable[..., Any] | None = None) -> dict[str, list[Any]]:
    """Run every contender once per repetition, in the given order, ``reps`` times; returns each one's results.

    ``warmup`` first runs each contender once, untimed (imports, first-call allocations, kernel caches).
    ``collect`` runs Python's garbage collector before each run, outside the contender's clock: in a process
    holding torch, timm and peft a full collection takes ~0.3 s of CPU on the 2-core machine, and one landing
    inside a short run, on either side at random, doubled that run's time per round.
    """
    if warmup:
        for fn in contenders.values():
            fn()
    out: dict[str, list[Any]] = {name: [] for name in contenders}
    for rep in range(reps):
        for name, fn in contenders.items():
            if collect:
                gc.collect()
            value = fn()
            out[name].append(value)
            if on_result is not None:
                on_result(rep, name, value)
    return out


def pair_ratios(base: list[float], other: list[float]) -> list[float]:
    """``base[i] / other[i]``: how many times faster ``other`` was than ``base`` in repetition ``i``."""
    return [b / o for b, o in zip(base, other)]


def ratio_line(base: list[float], other: list[float]) -> str:
    """``min 1.42x, median 1.57x (n=5)`` of the per-pair ratios ``base / other``."""
    r = pair_ratios(base, other)
    return f"min {min(r):.2f}x, median {statistics.median(r):.2f}x (n={len(r)})"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    import torch

    return (f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
            f"{sys.version.split()[0]}, torch {torch.__version__} ({torch.get_num_threads()} thread(s))")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min)"
