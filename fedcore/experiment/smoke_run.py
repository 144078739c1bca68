"""A smoke run (``fedcore run CONFIG --smoke``): the config's real architecture through the real pipeline, tiny.

What stays as configured: the model's architecture (random weights: ``pretrained`` is turned off), every
component of the pipeline with its settings, the partition rule, the device profiles and the clock. What is scaled
down, and printed:

* the data: synthetic labels of the stated class balance (or the real labels), inputs of the configured shape made
  of seeded noise, only for the samples that train and a global test set of ``batch`` samples, one evaluation batch
  (no dataset or weights need to be present);
* the partition: computed by the configured partitioner over the whole population and the whole (label) data set,
  then two clients are kept (client 0 and the first client with another device profile, else client 1), each with
  its first ``batch`` samples (and personal test samples), handed to the engine as a fixed partition;
* the run: one round; every ``*epochs`` setting of a component becomes 1 and every ``batch_size`` becomes ``batch``,
  so each client takes one local step; every ``shots`` setting (samples per class a selection keeps) becomes 1, since
  a kept client holds ``batch`` samples.

On a GPU (``--device cuda --precision bf16 --batch 32``) the outcome records the wave's wall time and
``torch.cuda.max_memory_allocated`` next to the dry run's memory estimate at the same batch.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
import time
from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.contexts import RunContext
from fedcore.errors import ConfigError
from fedcore.experiment.build import Plan, build_model, model_settings_for, table_kwargs
from fedcore.experiment.plan_data import DataShape, meta_datasets, noise_images, shape_of
from fedcore.pipeline import Pipeline
from fedcore.types import Partition, ServerState

DEFAULT_BATCH = 2
CPU_CLASSES = 10
"""On the CPU a smoke run folds the labels onto this many classes (``classes=0`` keeps them all)."""


@attrs.frozen(eq=False, kw_only=True)
class FixedPartition:
    """The smoke run's partition: the configured partitioner's result, cut down and renumbered (not registered)."""

    partition: Partition

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int) -> Partition:
        return self.partition


@attrs.frozen(eq=False, kw_only=True)
class WaveTimer:
    """Wraps the cohort slot: wall seconds of each dispatch wave (CUDA work is waited for)."""

    seconds: list[float] = attrs.field(factory=list)

    @fedcore.hookimpl(wrapper=True)
    def fedcore_train_cohort(self, jobs: Sequence[Any], ctx: Any) -> Any:
        _sync()
        start = time.perf_counter()
        out = yield
        _sync()
        self.seconds.append(time.perf_counter() - start)
        return out


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@attrs.frozen(kw_only=True)
class SmokeOutcome:
    name: str
    ok: bool
    problem: str | None
    device: str
    precision: str
    batch: int
    clients: tuple[int, ...]
    profiles: tuple[str | None, ...]
    scaled: tuple[str, ...]
    rows: tuple[Mapping[str, Any], ...]
    build_s: float
    run_s: float
    wave_s: tuple[float, ...]
    params: int
    peak_memory: int | None
    estimated_memory: Mapping[int, int]

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=False)
        out["rows"] = [dict(r) for r in self.rows]
        out["estimated_memory"] = {str(k): v for k, v in self.estimated_memory.items()}
        return out


def _client_pair(profiles: Sequence[str | None]) -> tuple[int, int]:
    other = next((c for c, name in enumerate(profiles) if name != profiles[0]), None)
    return 0, other if other is not None else 1


def _first(indices: Any, k: int) -> list[int]:
    return [int(i) for i in list(indices)[:k]]


@attrs.frozen(kw_only=True)
class Kept:
    """The kept clients' samples: original indices in the compact sets' order, and the renumbered partition."""

    train_order: list[int]
    test_order: list[int] | None
    partition: Partition


def _renumber(lists: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """The union of ``lists`` in first-seen order, and each list as positions in it (a sample two clients hold,
    as in vertical splits, stays one sample)."""
    order = list(dict.fromkeys(i for part in lists for i in part))
    where = {i: n for n, i in enumerate(order)}
    return order, [[where[i] for i in part] for part in lists]


def compact(full: Partition, clients: Sequence[int], k: int) -> Kept:
    """Keep ``clients``, each with its first ``k`` training samples (and personal test samples); a selection pool
    keeps those samples and up to ``k`` more of the pool."""
    train = [_first(full.train[c], k) for c in clients]
    pools = None
    if full.pool is not None:
        pools = [part + [int(i) for i in full.pool[c] if int(i) not in set(part)][:k]
                 for part, c in zip(train, clients)]
    order, renumbered = _renumber(train + (pools or []))
    parts, pool_parts = renumbered[:len(clients)], renumbered[len(clients):] or None
    test_order, test_parts = None, None
    if full.test is not None:
        test_order, test_parts = _renumber([_first(full.test[c], k) for c in clients])
    return Kept(train_order=order, test_order=test_order,
                partition=Partition(train=parts, test=test_parts, pool=pool_parts))


def scale_pipeline(pipeline: Mapping[str, Any], batch: int) -> tuple[dict[str, Any], list[str]]:
    """The resolved pipeline config with every ``*epochs`` and ``shots`` setting at 1 and every ``batch_size`` at
    ``batch``."""
    out, notes = copy.deepcopy(dict(pipeline)), []
    specs = [(slot, spec) for slot, spec in out.items() if isinstance(spec, dict)]
    specs += [(f"plugins[{i}]", spec) for i, spec in enumerate(out.get("plugins", [])) if isinstance(spec, dict)]
    for where, spec in specs:
        for key, value in list(spec.items()):
            if isinstance(value, bool) or not isinstance(value, int):
                continue
            if where == "schedule" and key == "fraction":
                continue
            new = 1 if (key.endswith("epochs") or key == "shots") and value > 1 else batch if key == "batch_size" \
                else value
            if new != value:
                spec[key] = new
                notes.append(f"{where}.{key}: {value} -> {new} ({spec['name']})")
    schedule = out.get("schedule")
    if isinstance(schedule, dict) and isinstance(schedule.get("fraction"), (int, float)) and schedule["fraction"] < 1:
        notes.append(f"schedule.fraction: {schedule['fraction']} -> 1.0 (both clients train)")
        schedule["fraction"] = 1.0
    return out, notes


def fold_classes(shape: DataShape, classes: int) -> DataShape:
    """The same data with labels folded onto the first ``classes`` classes (label mod ``classes``)."""
    return attrs.evolve(shape, train_labels=shape.train_labels % classes, test_labels=shape.test_labels % classes,
                        classes=shape.classes[:classes])


def smoke(p: Plan, *, device: str | None = None, precision: str | None = None, batch: int | None = None,
          classes: int | None = None, shape: DataShape | None = None, estimate: bool | None = None) -> SmokeOutcome:
    """Run the smoke round of the checked config ``p`` (see the module docstring). ``classes`` (default: 10 on the
    CPU, all on a GPU; 0 = all) folds the labels onto that many classes: a text tower that encodes every class name
    at every step (CLIP prompts) then costs tens of classes, not hundreds. ``estimate`` (default: on a CUDA device)
    adds the dry run's memory estimate of the two clients at the smoke's batch."""
    from fedcore.experiment.matrix import row_problem
    from fedcore.experiment.plan_costs import random_weights
    from fedcore.runtime.profiles import resolve

    cfg = p.config
    k = int(batch or DEFAULT_BATCH)
    if k < 1:
        raise ConfigError(f"--batch {k}: must be >= 1")
    device = device or "cpu"
    precision = precision or cfg["precision"]
    shape = shape or shape_of(p)
    full_shape = shape
    cuda = str(device).startswith("cuda")
    cap = (0 if cuda else CPU_CLASSES) if classes is None else int(classes)
    folded = 0 < cap < len(shape.classes)
    if folded:
        shape = fold_classes(shape, cap)
    n = cfg["num_clients"]
    meta_train, meta_test = meta_datasets(shape)
    kwargs = table_kwargs(cfg, meta_train, meta_test)
    names = resolve(kwargs.get("profiles"), n, cfg["seed"])
    run = RunContext(seed=cfg["seed"], num_clients=n, rounds=cfg["rounds"], train=meta_train, test=meta_test,
                     server=ServerState(model=nn.Module()))
    full = p.pipeline.hooks.fedcore_partition(dataset=meta_train, num_clients=n, test_dataset=meta_test, run=run)
    pair = _client_pair(names) if n > 1 else (0,)
    kept = compact(full, pair, k)
    train = noise_images(shape.train_labels[kept.train_order], shape.input, shape.classes, cfg["seed"], "train")
    if kept.test_order is not None:
        test = noise_images(shape.test_labels[kept.test_order], shape.input, shape.classes, cfg["seed"], "test")
    elif shape.test:
        test = noise_images(shape.test_labels[:k], shape.input, shape.classes, cfg["seed"], "test")
    else:
        test = None
    partition = kept.partition
    resolved, scaled = scale_pipeline(p.resolved["pipeline"], k)
    resolved["partition"] = FixedPartition(partition=partition)
    timer = WaveTimer()
    pipeline = Pipeline.from_config({**resolved, "plugins": [*resolved.get("plugins", []), timer]})
    profiles = f"profiles {', '.join(str(names[c]) for c in pair)}" if any(names) else "no device profiles"
    scaled = [f"clients: {n} -> {len(pair)} (clients {', '.join(map(str, pair))}; {profiles})",
              f"rounds: {cfg['rounds']} -> 1",
              f"data: {shape.train:,} train samples -> {len(train)} of seeded noise, input "
              f"{'x'.join(map(str, shape.input))}; test -> {0 if test is None else len(test)}",
              f"partition: {p.resolved['pipeline'].get('partition', {}).get('name', 'iid')} over the whole population "
              f"and data, then each kept client's first {k} samples", *scaled]
    if folded:
        scaled.append(f"classes: {len(full_shape.classes)} -> {cap} (labels folded: label mod {cap}; the model's "
                      f"class count follows the data unless the config sets it)")
    settings, notes = random_weights(p, model_settings_for(p, meta_train))
    scaled += notes
    torch.manual_seed(cfg["seed"])
    if cfg["threads"] > 0:
        torch.set_num_threads(cfg["threads"])
    start = time.perf_counter()
    model = build_model(p, settings)
    build_s = time.perf_counter() - start
    run_kwargs = table_kwargs(cfg, train, test, num_clients=len(pair))
    run_kwargs["profiles"] = [names[c] for c in pair]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    problem: str | None
    try:
        result = pipeline.run(model=model, train=train, test=test, num_clients=len(pair), rounds=1,
                              seed=cfg["seed"], eval_every=1, device=device, precision=precision, **run_kwargs)
        rows = tuple(dict(r) for r in result.history.rows)
        problem = row_problem(rows, 1)
    except Exception as exc:  # noqa: BLE001 - the smoke run reports any failure as its outcome
        rows, problem = (), f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    run_s = time.perf_counter() - start
    peak = int(torch.cuda.max_memory_allocated()) if cuda else None
    return SmokeOutcome(name=p.name, ok=problem is None, problem=problem, device=str(device), precision=precision,
                        batch=k, clients=tuple(pair), profiles=tuple(names[c] for c in pair), scaled=tuple(scaled),
                        rows=rows, build_s=build_s, run_s=run_s, wave_s=tuple(timer.seconds),
                        params=sum(t.numel() for t in model.parameters()), peak_memory=peak,
                        estimated_memory=estimated_memory(p, full_shape, pair, k) if (cuda if estimate is None
                                                                                 else estimate) else {})


def estimated_memory(p: Plan, shape: DataShape, clients: Sequence[int], batch: int) -> dict[int, int]:
    """The dry run's training memory of each smoke client at the smoke's batch (weights, gradients, optimizer state
    and saved activations; the activations scale with the batch)."""
    from fedcore.experiment.plan_costs import dry_run

    try:
        dry = dry_run(p, shape=shape)
    except ConfigError:
        return {}
    out = {}
    for c in clients:
        plan = dry.clients[c]
        per_sample = plan.memory["activations"] / max(plan.batch_size, 1)
        out[c] = int(plan.memory_total - plan.memory["activations"] + per_sample * batch)
    return out


def print_smoke(outcome: SmokeOutcome, console: Any) -> None:
    from rich.markup import escape

    from fedcore.experiment.plan_report import seconds, size

    state = "[green]passed[/green]" if outcome.ok else f"[red]FAILED[/red]: {escape(outcome.problem or '')}"
    console.print(f"[bold]smoke run of {escape(outcome.name)}[/bold]: {state}")
    console.print(f"model: {outcome.params:,} parameters, random weights, built in {seconds(outcome.build_s)}; "
                  f"device {outcome.device}, precision {outcome.precision}, batch {outcome.batch}")
    console.print(f"round: {seconds(outcome.run_s)} wall (dispatch waves: "
                  f"{', '.join(seconds(s) for s in outcome.wave_s) or '-'})")
    if outcome.peak_memory is not None:
        console.print(f"peak CUDA memory: {size(outcome.peak_memory)}")
    for c, est in outcome.estimated_memory.items():
        console.print(f"dry-run memory estimate of client {c} at batch {outcome.batch}: {size(est)}")
    for line in outcome.scaled:
        console.print(f"scaled down: {escape(line)}")
    if outcome.rows:
        row = outcome.rows[-1]
        shown = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not k.endswith("wall_s")}
        console.print("history: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in list(shown.items())[:12]))


__all__ = ["DEFAULT_BATCH", "FixedPartition", "SmokeOutcome", "print_smoke", "scale_pipeline", "smoke"]
