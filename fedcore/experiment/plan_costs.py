"""A dry run (``fedcore plan CONFIG``, ``fedcore run CONFIG --dry-run``): a round's costs without running it.

Every model is built on the meta device (shapes, no memory, no weights: a ``pretrained`` setting is turned off),
and the run's own code answers every question a real round would answer:

* the partition, the clients' device profiles and the schedule's choice of clients come from the pipeline's
  providers, on the data's labels (:mod:`fedcore.experiment.plan_data`);
* each client's share is cut by the real split provider, and its download is sent through a real
  :class:`fedcore.Channel` exactly as the engine sends it (:func:`fedcore.engine.dispatch.build_job`);
* what the job sends afterwards (per-batch traffic, the upload) and how many samples it processes come from
  ``fedcore_plan_job``, answered by the component that trains the job, or the default (the upload of
  ``share.upload``, ``epochs`` passes in batches of ``batch_size``);
* FLOPs and memory (weights, gradients, optimiser state, saved activations) come from the cost model
  (:mod:`fedcore.runtime.cost_model`) on meta tensors, and virtual seconds from the clock that prices real jobs
  (:class:`fedcore.runtime.SimClock`), on the configured device profiles.

So a dry run and a real run of the same config agree on bytes per kind, FLOPs, memory and virtual time; the tests
check it on configs that run for real here.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import math
from typing import Any
import warnings

import attrs
import torch
from torch import nn

from fedcore.contexts import RoundContext
from fedcore.errors import ConfigError, FedcoreError
from fedcore.experiment.build import Plan, build_model, factory_defaults, model_settings_for, table_kwargs
from fedcore.experiment.plan_data import DataShape, meta_datasets, shape_of
from fedcore.network import Transfer
from fedcore.rng import numpy_generator
from fedcore.types import ClientInfo, ClientUpdate, JobPlan, Share, upload_messages

REFERENCE_PROFILE = "phone"
"""The preset a config without a ``[clock]`` table is priced on (its real run keeps no virtual time)."""


@attrs.frozen(kw_only=True)
class ClientPlan:
    """One client's job in the planned round."""

    client: int
    profile: str | None
    samples: int  # the client's candidate pool
    selected: int  # what the job trains on
    params_held: int
    params_trained: int
    state_bytes: int  # the share module's state dict: what downloading everything it holds would carry
    forward_flops: float  # per sample
    train_flops: float  # per sample, forward + backward
    round_flops: float  # what the clock prices for the job
    train_samples: int
    eval_samples: int
    steps: int
    batch_size: int
    bytes: Mapping[str, Mapping[str, int]]  # direction -> kind -> bytes
    messages: Mapping[str, Mapping[str, int]]  # direction -> kind -> messages
    largest: Mapping[str, Mapping[str, int]]  # direction -> kind -> bytes of its largest message
    memory: Mapping[str, int]  # params, grads, optimizer, activations
    memory_limit: int | None
    compute_s: float
    comm_s: float
    first_download_s: float  # everything the client holds (a frozen backbone too), once, on its profile's link
    notes: tuple[str, ...] = ()

    @property
    def memory_total(self) -> int:
        return sum(self.memory.values())

    @property
    def fits(self) -> bool | None:
        return None if self.memory_limit is None else self.memory_total <= self.memory_limit

    def total_bytes(self, direction: str) -> int:
        return sum(self.bytes.get(direction, {}).values())

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=False)
        out["bytes"] = {d: dict(k) for d, k in self.bytes.items()}
        out["messages"] = {d: dict(k) for d, k in self.messages.items()}
        out["largest"] = {d: dict(k) for d, k in self.largest.items()}
        out["memory"] = dict(self.memory)
        out["memory_total"] = self.memory_total
        out["fits"] = self.fits
        out["notes"] = list(self.notes)
        return out


@attrs.frozen(kw_only=True)
class DryRun:
    """The plan of one round: per client, the dispatched clients, the global model and what was assumed."""

    name: str
    round: int
    num_clients: int
    data: DataShape
    model: Mapping[str, Any]
    clients: tuple[ClientPlan, ...]
    dispatched: tuple[int, ...]
    clock_configured: bool
    optimizer_slots: int
    notes: tuple[str, ...] = ()

    def round_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes of the round by direction and kind, over the clients the schedule dispatches."""
        out: dict[str, dict[str, int]] = {}
        for c in self.clients:
            if c.client in self.dispatched:
                for direction, kinds in c.bytes.items():
                    for kind, n in kinds.items():
                        out.setdefault(direction, {})[kind] = out.setdefault(direction, {}).get(kind, 0) + n
        return out

    def round_seconds(self) -> float:
        """Virtual seconds of a synchronous round: its slowest dispatched client."""
        return max((c.compute_s + c.comm_s for c in self.clients if c.client in self.dispatched), default=0.0)

    def round_flops(self) -> float:
        return sum(c.round_flops for c in self.clients if c.client in self.dispatched)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "round": self.round, "num_clients": self.num_clients,
                "data": self.data.describe(), "model": dict(self.model), "dispatched": list(self.dispatched),
                "clock_configured": self.clock_configured, "optimizer_slots": self.optimizer_slots,
                "round_bytes": self.round_bytes(), "round_seconds": self.round_seconds(),
                "round_flops": self.round_flops(), "notes": list(self.notes),
                "clients": [c.to_dict() for c in self.clients]}


# -- the model on the meta device ---------------------------------------------------------------------------


def random_weights(p: Plan, settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The model settings with ``pretrained`` turned off (the factory's own falsy default, else ``False``):
    a dry run and a smoke run need the architecture, never the weights."""
    takes = factory_defaults(p.model.obj)[0]
    value = settings.get("pretrained", takes.get("pretrained"))
    if "pretrained" not in settings and "pretrained" not in takes or not value:
        return settings, []
    default = takes.get("pretrained")
    off = default if not default else (None if isinstance(value, str) else False)
    return {**settings, "pretrained": off}, [f"model {p.model.name}: pretrained = {value!r} replaced by {off!r} "
                                             f"(random weights: the architecture is what counts)"]


def meta_model(p: Plan, train: Any) -> tuple[nn.Module, dict[str, Any], list[str]]:
    """The config's model built on the meta device with random-weight settings; one line when it cannot be."""
    settings, notes = random_weights(p, model_settings_for(p, train))
    try:
        with torch.device("meta"), warnings.catch_warnings():
            # a factory that loads weights it caches (fedcore's pre-trained micro models) copies them into meta
            # tensors: a no-op, which torch announces once per tensor
            warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter.*")
            model = build_model(p, settings)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any factory may fail on the meta device; say which and why
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"model {p.model.name} cannot be built on the meta device for a dry run "
                          f"({type(exc).__name__}: {line[:160]}); its factory must build inside "
                          f"`with torch.device('meta')` without reading or training weights") from None
    real = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if not t.is_meta]
    if real:
        raise ConfigError(f"model {p.model.name} holds tensors outside the meta device after a meta build "
                          f"({real[:3]}); its factory must create them on torch's default device")
    return model, settings, notes


def model_summary(model: nn.Module, example: torch.Tensor) -> dict[str, Any]:
    """Parameters and forward FLOPs per sample of the global model, with the top-level children's shares."""
    from torch.utils.flop_counter import FlopCounterMode

    from fedcore.runtime.cost_model import _extra_formulas
    from fedcore.runtime.meta_kernels import cpu_attention

    out: dict[str, Any] = {"params": sum(p.numel() for p in model.parameters()),
                           "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
                           "children": {n: sum(p.numel() for p in c.parameters()) for n, c in model.named_children()}}
    was = model.training
    try:
        model.eval()
        with FlopCounterMode(display=False, custom_mapping=_extra_formulas()) as counter, torch.no_grad(), \
                cpu_attention():
            model(example)
        batch = int(example.shape[0])
        out["forward_flops"] = counter.get_total_flops() / batch
        counts = counter.get_flop_counts()
        top = type(model).__name__
        totals = {name: sum(ops.values()) for name, ops in counts.items()}
        out["forward_flops_children"] = {  # a child called through a method of its parent is counted below it
            n: max((t for k, t in totals.items() if k == f"{top}.{n}" or k.startswith(f"{top}.{n}.")), default=0)
            / batch for n, _ in model.named_children()}
    except Exception as exc:  # noqa: BLE001 - a global model need not have a plain forward (a split system)
        out["forward_flops"] = None
        out["forward_error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"
    finally:
        model.train(was)
    return out


# -- the round ----------------------------------------------------------------------------------------------


def default_job_plan(update: Any, share: Share, samples: int) -> JobPlan:
    """The plan of a job whose trainer states none: ``epochs`` passes in batches of ``batch_size`` over the samples
    (a local update's ``vectorised_plan(share)``, the :class:`fedcore.training.TrainPlan` it promises to run, or its
    ``epochs`` and ``batch_size`` settings), then the upload of ``share.upload`` (``fedcore.types.upload_messages``)."""
    stated = update.vectorised_plan(share) if hasattr(update, "vectorised_plan") else None
    source = stated if stated is not None else update
    epochs = int(getattr(source, "epochs", 1) or 1)
    batch = int(getattr(source, "batch_size", 32) or 32)
    try:
        messages = upload_messages(share)
    except KeyError as exc:
        raise ConfigError(f"{type(update).__name__}: {exc.args[0]}") from None
    return JobPlan(messages=messages, train_samples=epochs * samples, num_examples=samples,
                   steps=epochs * math.ceil(samples / batch), batch_size=min(batch, max(samples, 1)))


def _by_kind(rows: Sequence[Transfer], field: str) -> dict[str, dict[str, int]]:
    """Per direction and kind: the bytes, the messages, or the largest message (a planned row is ``messages``
    equal messages)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        kinds = out.setdefault(r.direction, {})
        if field == "largest":
            kinds[r.kind] = max(kinds.get(r.kind, 0), r.nbytes // max(r.messages, 1))
        else:
            kinds[r.kind] = kinds.get(r.kind, 0) + (r.nbytes if field == "nbytes" else r.messages)
    return out


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def dry_run(p: Plan, *, round: int = 0, shape: DataShape | None = None) -> DryRun:
    """Plan round ``round`` of the checked config ``p`` (see the module docstring).

    Every model runs on meta tensors, so a kernel call repeated with the same shapes (the next client's share, the
    cost model's second pass, the next dry run of the same architecture) is answered from
    :func:`fedcore.runtime.meta_kernels.memoised_meta_kernels` instead of torch's Python meta kernels."""
    from fedcore.runtime.meta_kernels import memoised_meta_kernels

    with memoised_meta_kernels():
        return _plan_round(p, round=round, shape=shape)


def _plan_round(p: Plan, *, round: int, shape: DataShape | None) -> DryRun:
    from fedcore.engine.idle import IdleClients
    from fedcore.engine.loop import Engine
    from fedcore.engine.spec import RunSpec
    from fedcore.runtime.clock import SimClock, optimizer_slots_of

    cfg = p.config
    if not 0 <= round < max(cfg["rounds"], 1):
        raise ConfigError(f"--round {round}: the config runs rounds 0..{max(cfg['rounds'], 1) - 1}")
    shape = shape or shape_of(p)
    train, test = meta_datasets(shape)
    if len(train) < cfg["num_clients"]:
        raise ConfigError(f"num_clients = {cfg['num_clients']} is more than the {len(train)} training samples")
    model, settings, notes = meta_model(p, train)
    kwargs = table_kwargs(cfg, train, test)
    clock = kwargs.get("clock")
    configured = clock is not None
    if clock is None:
        clock = SimClock(default_profile=REFERENCE_PROFILE, check_memory=False)
        notes.append(f"no [clock] table: the run keeps no virtual time; priced on the {REFERENCE_PROFILE!r} preset "
                     f"for reference")
    if cfg.get("faults"):
        notes.append("faults are not simulated: every client is online and every upload arrives")
    if cfg["precision"] != "fp32":
        notes.append(f"precision = {cfg['precision']!r}: bytes and memory are counted in fp32 (autocast halves the "
                     f"activations a split model sends; not modelled)")
    if shape.synthetic:
        notes.append("labels are synthetic (balanced, seeded by the run's seed): partitions that read labels give "
                     "realistic sample counts, not the real ones")
    try:
        engine = Engine(p.pipeline, RunSpec(model=model, train=train, test=test, num_clients=cfg["num_clients"],
                                            rounds=cfg["rounds"], seed=cfg["seed"], clock=clock,
                                            profiles=kwargs.get("profiles"), device="cpu"))
        engine.setup()
        run = engine.run_ctx
        engine.hooks.fedcore_run_start(run=run)
        run.server.version = round
        ctx = RoundContext(round=round, seed=run.seed, run=run)
        engine.hooks.fedcore_round_start(ctx=ctx)
        chosen = engine.scheduler.dispatch(round=round, now=0.0, idle=IdleClients(len(run.clients), []), busy=[],
                                           rng=numpy_generator(run.seed, "schedule", round))
    except ConfigError:
        raise
    except (Exception, FedcoreError) as exc:  # noqa: BLE001 - a component that cannot run on meta: one line
        raise ConfigError(f"the round's set-up cannot run on the meta device: {type(exc).__name__}: "
                          f"{_one_line(exc)}") from None
    update = p.pipeline.provider("local_update")
    slots = int(getattr(engine.clock, "optimizer_slots", None) or optimizer_slots_of(update))
    plans = [plan_client(engine, client, ctx, update) for client in run.clients]
    example = train.x[:2]
    summary = {"name": p.model.name, "settings": {k: v for k, v in settings.items() if not isinstance(v, list)
                                                  or len(v) <= 8},
               **model_summary(model, example)}
    return DryRun(name=p.name, round=round, num_clients=cfg["num_clients"], data=shape, model=summary,
                  clients=tuple(plans), dispatched=tuple(sorted(int(c) for c in chosen)),
                  clock_configured=configured, optimizer_slots=slots, notes=tuple(notes))


def plan_client(engine: Any, client: ClientInfo, ctx: RoundContext, update: Any) -> ClientPlan:
    """One client's job: its share (real split, meta weights), the download as sent, the trainer's plan, the price."""
    from fedcore.engine.dispatch import build_job
    from fedcore.jobs import JobResult

    run, clock = engine.run_ctx, engine.clock
    notes: list[str] = []
    try:
        job, share, _ = build_job(engine.parts, client, ctx)
    except (Exception, FedcoreError) as exc:  # noqa: BLE001
        raise ConfigError(f"the split cannot cut client {client.id}'s share on the meta device: "
                          f"{type(exc).__name__}: {_one_line(exc)}") from None
    job = attrs.evolve(job, dataset=run.train, hooks=engine.hooks)
    pool = len(job.pool)
    try:
        selected = len(job.select_data())
    except (Exception, FedcoreError) as exc:  # noqa: BLE001 - a selection that scores data cannot run on meta inputs
        selected = pool
        notes.append(f"select = {type(engine.pipeline.provider('select')).__name__} needs real data "
                     f"({type(exc).__name__}); planned on the whole pool of {pool} (an upper bound)")
    try:
        example = clock.example(client)
        plan = engine.hooks.fedcore_plan_job(client=client, share=share, samples=selected, example=example,
                                             ctx=job.ctx)
    except (Exception, FedcoreError) as exc:  # noqa: BLE001
        raise ConfigError(f"fedcore_plan_job failed for client {client.id}: {type(exc).__name__}: "
                          f"{_one_line(exc)}") from None
    if plan is None:
        plan = default_job_plan(update, share, selected)
    notes.extend(plan.notes)
    for m in plan.messages:
        job.channel.rows.append(Transfer(round=ctx.round, client=client.id, direction=m.direction, kind=m.kind,
                                         nbytes=m.total, messages=m.count))
    try:
        cost = clock.cost(client, share)
        memory = clock.memory_needed(client, share)
    except (Exception, FedcoreError) as exc:  # noqa: BLE001
        raise ConfigError(f"the cost model cannot measure client {client.id}'s share on the meta device: "
                          f"{type(exc).__name__}: {_one_line(exc)}") from None
    result = JobResult(client_id=client.id, update=ClientUpdate(tensors={}, num_examples=plan.num_examples),
                       state=job.state, channel=job.channel, wall_s=0.0,
                       work={"train_samples": plan.train_samples, "eval_samples": plan.eval_samples})
    clock.collect()
    clock.duration(client, result, share=share, round=ctx.round)
    priced = clock.collect()
    module = share.module
    profile = client.profile or clock.default_profile
    link = clock.profiles[profile] if profile in clock.profiles else None
    state_bytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    return ClientPlan(
        client=client.id, profile=profile, samples=pool, selected=selected,
        params_held=sum(t.numel() for t in module.parameters()),
        params_trained=sum(t.numel() for t in module.parameters() if t.requires_grad),
        state_bytes=state_bytes, forward_flops=cost.forward_flops, train_flops=cost.train_flops,
        round_flops=priced.get("virtual_flops", 0.0), train_samples=plan.train_samples, eval_samples=plan.eval_samples,
        steps=plan.steps, batch_size=int(clock.batch_size or plan.batch_size or 0),
        bytes=_by_kind(job.channel.rows, "nbytes"), messages=_by_kind(job.channel.rows, "messages"),
        largest=_by_kind(job.channel.rows, "largest"), memory=memory,
        memory_limit=link.memory_bytes if link is not None else None,
        compute_s=priced.get("virtual_compute_s", 0.0), comm_s=priced.get("virtual_comm_s", 0.0),
        first_download_s=8.0 * state_bytes / link.down_bps if link is not None else 0.0, notes=tuple(notes))


__all__ = ["REFERENCE_PROFILE", "ClientPlan", "DryRun", "default_job_plan", "dry_run", "meta_model", "model_summary",
           "random_weights"]
