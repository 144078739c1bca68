"""Is vectorising a group of clients faster than training them one by one on this CPU? A timed probe, cached.

``vmap`` turns a convolution into a grouped one, which CPU kernels can run slower than one client after
another, while small models are bound by per-call overhead and win when batched (``benchmarks/README.md``).
Which side wins depends on the model, the batch, the CPU and the thread count, so no fixed rule can be right
everywhere: the ``vectorised`` cohort (``on_cpu = "auto"``) measures it once. :func:`probe` times a one-step
local update of a few throw-away copies of the group's model on one real batch, both ways, interleaved
(one by one through :func:`fedcore.training.train_epochs`, as ``per-job`` trains; stacked through
:class:`~fedcore.builtin.stacked_training.StackedRun`, as the cohort trains): a warm-up of each side, which
decides alone when one side is ``CLEAR``-ly faster, else the best of ``REPS`` more per side. It vectorises only
when that is clearly faster (``MARGIN``), so a close or noisy probe trains one by one, which is what ``per-job``
would have done.

The copies are trained inside a forked torch RNG and outside every sample meter: the probe leaves no trace
in the clients' modules, random streams or virtual clock. The choice is stored on disk (``$FEDCORE_CACHE``,
default ``~/.cache/fedcore``, under ``cohort-probes/``) per model and plan, device, CPU, threads and torch
version, so a later run on the same machine makes the same choice without timing anything; the cohort
also records it in the run (``RunContext.settings``, checkpointed) so that a resumed run repeats it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
import platform
import tempfile
import time
from typing import Any

import torch
from torch import nn

from fedcore.builtin.clone import clone_module
from fedcore.builtin.stacked_optim import StackedOptimizer
from fedcore.builtin.stacked_training import StackedRun, replace_dropout
from fedcore.data.arrays import ArrayDataset
from fedcore.runtime.meter import uncounted
from fedcore.training import TrainPlan, train_epochs
from fedcore.types import ClientData

log = logging.getLogger("fedcore.cohort")

VECTORISE, ONE_BY_ONE = "vectorise", "one-by-one"

MARGIN = 0.9
"""Vectorise only when the probe's vectorised step takes at most this fraction of the one-by-one steps."""

PROBE_CLIENTS = 4
"""At most this many client copies in the probe, so that it costs a few training steps; a larger chunk batches
better still, so the probe errs towards one by one."""

REPS = 2
"""Timed repetitions per side after a warm-up of each, interleaved; the best of each side counts."""

CLEAR = 1.5
"""A warm-up in which one side took at least this many times the other decides alone (no timed repetitions)."""


def group_key(module: nn.Module, plan: TrainPlan, architecture: tuple[Any, ...]) -> str:
    """A short stable name for (architecture, plan): the same model and loop give the same key in every process."""
    digest = hashlib.sha256(repr((architecture, plan)).encode()).hexdigest()[:16]
    return f"{type(module).__name__}-{digest}"


def machine(device: torch.device) -> dict[str, Any]:
    """What a timing depends on besides the model: device, CPU, torch threads, torch version."""
    return {"device": str(device), "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def _cache_file(key: str, where: dict[str, Any]) -> Path:
    root = Path(os.environ.get("FEDCORE_CACHE", Path.home() / ".cache" / "fedcore")) / "cohort-probes"
    digest = hashlib.sha256(json.dumps([key, where], sort_keys=True).encode()).hexdigest()[:20]
    return root / f"{digest}.json"


def cached(key: str, where: dict[str, Any]) -> dict[str, Any] | None:
    """The stored probe record for ``key`` on this machine, or ``None`` (none, or unreadable)."""
    try:
        record = json.loads(_cache_file(key, where).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("choice") in (VECTORISE, ONE_BY_ONE) else None


def remember(key: str, where: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """Store ``record`` unless another process stored one first (then that one is returned: the first wins)."""
    path = _cache_file(key, where)
    earlier = cached(key, where)
    if earlier is not None:
        return earlier
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({**record, "key": key, **where}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: the run still records its choice, only later runs probe again
        log.debug("vectorised cohort: could not store the probe in %s: %s", path, exc)
    return record


def probe(module: nn.Module, plan: TrainPlan, x: torch.Tensor, y: torch.Tensor, clients: int, *, pad: bool
          ) -> dict[str, Any]:
    """Time one local step of ``clients`` copies of ``module`` on the batch ``(x, y)``: one by one vs vectorised.

    Returns ``{"choice", "one_by_one_ms", "vectorised_ms", "clients"}`` (milliseconds for all ``clients``;
    ``vectorised_ms`` is ``None`` when the batched computation raises, e.g. an op ``vmap`` cannot batch).
    """
    kwargs = {k: v for k, v in plan.kwargs().items() if k not in ("epochs", "batch_size")}
    data = ClientData(dataset=ArrayDataset(x, y), indices=range(len(y)))
    with torch.random.fork_rng(devices=[]), uncounted():
        alone = clone_module(module)
        template = clone_module(module)
        template.train()
        sites = replace_dropout(template, x)
        params = dict(template.named_parameters())
        buffers = dict(template.named_buffers())

        def one_by_one() -> None:
            for _ in range(clients):
                train_epochs(alone, data, epochs=1, batch_size=len(y), **kwargs)

        def vectorised() -> None:
            StackedRun(template=template,
                       train={k: torch.stack([p.detach()] * clients) for k, p in params.items() if p.requires_grad},
                       frozen={}, shared={k: p.detach() for k, p in params.items() if not p.requires_grad},
                       buffers={k: torch.stack([b] * clients) for k, b in buffers.items()},
                       streams=[[(x, y)]] * clients,
                       optimizer=StackedOptimizer(name=plan.optimizer, lr=plan.lr, momentum=plan.momentum,
                                                  weight_decay=plan.weight_decay),
                       mu=plan.mu, clip_norm=plan.clip_norm, pad=pad, dropout=sites,
                       generators=[torch.Generator().manual_seed(i) for i in range(clients)]).fit()

        best = {"one": float("inf"), "vec": float("inf")}
        sides = {"one": one_by_one, "vec": vectorised}
        for rep in range(REPS + 1):  # rep 0 warms both up (allocator, kernels); it counts only when it is clear
            took = {}
            for name in list(sides):
                start = time.perf_counter()
                try:
                    sides[name]()
                except Exception as exc:  # the real chunk would fail the same way and then run one by one
                    log.debug("vectorised cohort: the probe's batched step failed: %s", exc)
                    del sides[name]
                    continue
                took[name] = time.perf_counter() - start
                if rep:
                    best[name] = min(best[name], took[name])
            if len(sides) < 2:
                break
            if rep == 0 and not 1 / CLEAR < took["vec"] / took["one"] < CLEAR:
                best = took
                break
    one_ms = best["one"] * 1e3
    vec_ms = best["vec"] * 1e3 if "vec" in sides else None
    choice = VECTORISE if vec_ms is not None and vec_ms <= MARGIN * one_ms else ONE_BY_ONE
    return {"choice": choice, "one_by_one_ms": round(one_ms, 3),
            "vectorised_ms": None if vec_ms is None else round(vec_ms, 3), "clients": clients}
