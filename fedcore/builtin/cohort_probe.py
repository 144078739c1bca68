"""Is vectorising a group of clients faster than training them one by one on this CPU? A timed probe, cached.

``vmap`` turns a convolution into a grouped one, which CPU kernels can run slower than one client after
another, while small models are bound by per-call overhead and win when batched (``benchmarks/README.md``).
Which side wins depends on the model, the batch, the CPU and the thread count, so no fixed rule can be right
everywhere: the ``vectorised`` cohort (``on_cpu = "auto"``) measures it once. :func:`probe` times a short local
update (``PROBE_STEPS`` steps on one real batch) of throw-away copies of the group's model both ways: one client
through :func:`fedcore.training.train_epochs`, as ``per-job`` trains each client (its time, times the number of
clients), and ``PROBE_CLIENTS`` clients stacked through :class:`~fedcore.builtin.stacked_training.StackedRun`, as
the cohort trains them. After an untimed warm-up of each side, up to ``REPS`` repetitions alternate the two sides
and the best of each counts. The clock is the process's CPU time, which other jobs on a shared machine do not
inflate the way they stretch wall time. It vectorises only when that is clearly faster (``MARGIN``), so a close
probe trains one by one, which is what ``per-job`` would have done.

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

MARGIN = 0.75
"""Vectorise only when the stacked clients take at most this fraction of their one-by-one time. The probe's
clients are equal; real ones are not (a client with more data steps on alone at the end, padding fills the
shorter batches), which cost the demo's CNN about a third more than the probe shows: hence the wide margin."""

PROBE_CLIENTS = 8
"""At most this many stacked client copies in the probe, so that it costs a few dozen training steps; a larger
chunk batches better still, so the probe errs towards one by one."""

PROBE_STEPS = 2
"""Local steps per probed client (fewer when the clients take fewer): the optimizer set-up of each one-by-one
client and the stacking of a chunk weigh against the steps about as they do in a real local update."""

REPS = 2
"""Timed repetitions per side after an untimed warm-up of each, interleaved; the best of each side counts. The
second is skipped when the first lands at least ``DECISIVE`` away from ``MARGIN`` (the usual case)."""

DECISIVE = 0.1
"""How far from ``MARGIN`` (in vectorised/one-by-one time) the first timed repetition must land to decide alone."""


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
    """Store ``record`` unless another process stored one first; returns the stored one (the first writer wins).

    Two workers of one run that probe at the same moment (Ray) then both train the way the first one chose.
    """
    path = _cache_file(key, where)
    earlier = cached(key, where)
    if earlier is not None:
        return earlier
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({**record, "key": key, **where}, f, indent=1, sort_keys=True)
        try:
            os.link(tmp, path)  # fails if the file exists: never replaces another process's record
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as exc:  # a read-only home: the run still records its choice, only later runs probe again
        log.debug("vectorised cohort: could not store the probe in %s: %s", path, exc)
        return record
    stored = cached(key, where)
    return record if stored is None else {k: v for k, v in stored.items() if k in record}


def probe(module: nn.Module, plan: TrainPlan, x: torch.Tensor, y: torch.Tensor, clients: int, *, steps: int = 1,
          pad: bool) -> dict[str, Any]:
    """CPU time of ``steps`` local steps of ``clients`` copies of ``module`` on the batch ``(x, y)``, both ways.

    Returns ``{"choice", "one_by_one_ms", "vectorised_ms", "clients", "steps"}`` (milliseconds of process CPU
    time for all ``clients``; ``vectorised_ms`` is ``None`` when the batched computation raises, e.g. an op
    ``vmap`` cannot batch).
    """
    kwargs = {k: v for k, v in plan.kwargs().items() if k not in ("epochs", "batch_size")}
    data = ClientData(dataset=ArrayDataset(x.repeat(steps, *[1] * (x.dim() - 1)), y.repeat(steps)),
                      indices=range(steps * len(y)))
    with torch.random.fork_rng(devices=[]), uncounted():
        alone = clone_module(module)
        template = clone_module(module)
        template.train()
        sites = replace_dropout(template, x)
        params = dict(template.named_parameters())
        buffers = dict(template.named_buffers())

        def one_by_one(warm: bool = False) -> None:  # one client: the one-by-one time is linear in the clients
            train_epochs(alone, data, epochs=1, batch_size=len(y), **kwargs)

        def vectorised(warm: bool = False) -> None:
            n = 2 if warm else clients  # the warm-up only has to run every kernel once
            StackedRun(template=template,
                       train={k: torch.stack([p.detach()] * n) for k, p in params.items() if p.requires_grad},
                       frozen={}, shared={k: p.detach() for k, p in params.items() if not p.requires_grad},
                       buffers={k: torch.stack([b] * n) for k, b in buffers.items()},
                       streams=[[(x, y)] * (1 if warm else steps)] * n,
                       optimizer=StackedOptimizer(name=plan.optimizer, lr=plan.lr, momentum=plan.momentum,
                                                  weight_decay=plan.weight_decay),
                       mu=plan.mu, clip_norm=plan.clip_norm, pad=pad, dropout=sites,
                       generators=[torch.Generator().manual_seed(i) for i in range(n)]).fit()

        best = {"one": float("inf"), "vec": float("inf")}
        sides = {"one": one_by_one, "vec": vectorised}
        for rep in range(REPS + 1):  # rep 0 warms both sides up (first calls, allocator) and is not counted
            for name in list(sides):
                start = time.process_time()
                try:
                    sides[name](warm=rep == 0)
                except Exception as exc:  # the real chunk would fail the same way and then run one by one
                    log.debug("vectorised cohort: the probe's %s side failed: %s", name, exc)
                    del sides[name]
                    continue
                if rep:
                    best[name] = min(best[name], time.process_time() - start)
            if len(sides) < 2:
                break
            if rep and abs(best["vec"] / (best["one"] * clients) - MARGIN) >= DECISIVE:
                break
    one_ms = best["one"] * clients * 1e3 if "one" in sides else None
    vec_ms = best["vec"] * 1e3 if "vec" in sides else None
    choice = VECTORISE if vec_ms is not None and (one_ms is None or vec_ms <= MARGIN * one_ms) else ONE_BY_ONE
    return {"choice": choice, "one_by_one_ms": None if one_ms is None else round(one_ms, 3),
            "vectorised_ms": None if vec_ms is None else round(vec_ms, 3), "clients": clients, "steps": steps}
