"""The ``vectorised`` cohort: whole-model clients of one architecture trained together with ``torch.func``.

    cohort = {name = "vectorised"}             # in a TOML [pipeline]; or VectorisedCohort() in Python

Each client ends where the ``sgd`` local update would have taken it alone (within float rounding): the same
selected data, the same shuffled batches (its own ``ctx.rng("shuffle")``), the same dropout masks (its own
seeded stream), the same BatchNorm statistics, the same ``torch.optim`` arithmetic. What cannot be
vectorised falls back to the one-by-one ``per-job`` cohort, and the log says why once per reason. On the
CPU, ``on_cpu = "auto"`` vectorises a group only where a timed probe says it is faster
(:mod:`fedcore.builtin.cohort_probe`); the choice is recorded in the run and repeated on resume.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import logging
import traceback
from typing import TYPE_CHECKING, Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.builtin import cohort_probe
from fedcore.builtin.clone import clone_module
from fedcore.builtin.per_job_cohort import PerJobCohort
from fedcore.builtin.stacked_optim import StackedOptimizer
from fedcore.builtin.stacked_training import StackedRun, replace_dropout
from fedcore.data.arrays import batches
from fedcore.runtime.meter import book_samples, uncounted
from fedcore.runtime.placement import active_placement
from fedcore.settings import setting
from fedcore.training import TrainPlan
from fedcore.types import ClientFailed, ClientUpdate, Share

if TYPE_CHECKING:
    from fedcore.contexts import RoundContext
    from fedcore.jobs import ClientJob

log = logging.getLogger("fedcore.cohort")

Outcome = ClientUpdate | ClientFailed

CHOICES = "vectorised-cohort"
"""``RunContext.settings`` key: group key -> the ``on_cpu = "auto"`` choice made for it (replayed on resume)."""

TRAINED = "vectorised-cohort.trained"
"""``RoundContext.info`` key: how many of the round's arrived updates were trained vectorised."""

METRIC = "cohort_vectorised"
"""History column: clients of the round whose update was trained in a batched computation."""


def _defined_in(cls: type, attribute: str) -> type | None:
    return next((c for c in cls.__mro__ if attribute in vars(c)), None)


def _name(component: Any) -> str:
    entry = fedcore.plugins.registry().find(component)
    return entry.name if entry is not None else type(component).__name__


def batch_coupled(module: nn.Module) -> bool:
    """Whether a layer mixes the samples of a batch in training (BatchNorm): then padding would change it."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


FP16_ONE_BY_ONE = ("precision='fp16' scales each client's loss on its own (torch.amp.GradScaler skips the steps that "
                   "overflow), which the batched computation does not do")
"""Why fp16 runs one by one (bf16 and fp32 are vectorised)."""


def architecture(module: nn.Module) -> tuple[Any, ...]:
    """What two modules must share to be stepped in one batched forward: layers, settings, state shapes."""
    return Layout.of(module).architecture


@attrs.frozen(kw_only=True, eq=False)
class Layout:
    """A module's :func:`architecture` with its parameters and buffers by name, from one walk over its modules."""

    architecture: tuple[Any, ...]
    params: dict[str, nn.Parameter]
    buffers: dict[str, torch.Tensor]

    @classmethod
    def of(cls, module: nn.Module, reprs: dict[int, str] | None = None) -> Layout:
        """``reprs`` remembers each module object's ``extra_repr`` across the modules of a wave: clients that
        share their frozen layers (``share_frozen_copy``) describe them once."""
        reprs = {} if reprs is None else reprs
        layers: list[tuple[type, str]] = []
        params: dict[str, nn.Parameter] = {}
        buffers: dict[str, torch.Tensor] = {}
        seen: set[int] = set()  # as named_parameters() and named_buffers(): a shared tensor counts once
        for prefix, m in module.named_modules():
            text = reprs.get(id(m))
            if text is None:
                text = reprs[id(m)] = m.extra_repr()
            layers.append((type(m), text))
            dot = f"{prefix}." if prefix else ""
            for n, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    params[dot + n] = p
            for n, b in m._buffers.items():
                if b is not None and id(b) not in seen:
                    seen.add(id(b))
                    buffers[dot + n] = b
        shape = (tuple(layers),
                 tuple((n, tuple(p.shape), p.dtype, p.requires_grad, p.device) for n, p in params.items()),
                 tuple((n, tuple(b.shape), b.dtype) for n, b in buffers.items()))
        return cls(architecture=shape, params=params, buffers=buffers)


@attrs.frozen(eq=False, kw_only=True)
class VectorisedCohort:
    """Trains a wave's whole-model clients together: stacked parameters, ``functional_call``, ``vmap`` over ``grad``.

    Clients with the same architecture are trained ``chunk`` at a time (one batched forward and backward
    per local step; lower ``chunk`` when memory runs short); unequal local data is padded and masked. The
    local update must state its loop as a ``TrainPlan`` (the built-in ``sgd``: SGD with momentum or Adam,
    weight decay, FedProx ``mu``) with no wrapper around it; anything else runs one by one (``per-job``).
    On an accelerator it always vectorises. On the CPU, ``on_cpu = "auto"`` times a probe on the first wave
    of each new model: 2 local steps of 1 client one by one and of up to 8 clients stacked, in CPU time,
    and vectorises only if stacked takes at most 0.75x the one-by-one time; the choice is cached per model,
    device and threads and recorded in the run (manifest and checkpoint), so a repeated or resumed run
    makes the same one. ``"vectorise"``/``"one-by-one"`` pin it.
    The history column ``cohort_vectorised`` counts the clients trained vectorised each round.
    """

    chunk: int = setting(64, low=1, help="most clients stepped in one batched computation (bounds memory)")
    on_cpu: str = setting("auto", choices=("auto", "vectorise", "one-by-one"),
                          help="on the CPU: vectorise where a timed probe says it is faster (auto), always, or never")
    _said: set[str] = attrs.field(factory=set, init=False, repr=False)

    # -- the round's record: choices replayed from the run, clients counted at arrival ---------

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: RoundContext) -> None:
        """Every client-bound copy of ``ctx`` carries the run's recorded choices (to a Ray worker too)."""
        if ctx.run is not None and ctx.run.settings.get(CHOICES):
            ctx.info[CHOICES] = dict(ctx.run.settings[CHOICES])

    @fedcore.hookimpl
    def fedcore_client_done(self, client: Any, update: ClientUpdate, ctx: RoundContext) -> None:
        if update.meta.get("cohort") == "vectorised":
            ctx.info[TRAINED] = ctx.info.get(TRAINED, 0) + 1
        made = update.meta.get("cohort_choice")
        if made and ctx.run is not None:  # a choice made where no run was reachable (a Ray worker)
            recorded = ctx.run.settings.setdefault(CHOICES, {})
            for key, record in made.items():
                recorded.setdefault(key, dict(record))

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float]:
        return {METRIC: float(ctx.info.get(TRAINED, 0))}

    # -- training a wave ----------------------------------------------------------------------

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs: Sequence[ClientJob], ctx: RoundContext) -> list[Outcome]:
        per_job = PerJobCohort()
        if len(jobs) < 2:
            return per_job.fedcore_train_cohort(jobs=jobs, ctx=ctx)
        planner, reason = self._planner(jobs[0])
        if planner is None:
            self._say(f"vectorised cohort: {reason}; training one by one", logging.WARNING)
            return per_job.fedcore_train_cohort(jobs=jobs, ctx=ctx)
        if active_placement().precision == "fp16":
            self._say(f"vectorised cohort: {FP16_ONE_BY_ONE}; training one by one", logging.INFO)
            return per_job.fedcore_train_cohort(jobs=jobs, ctx=ctx)
        out: dict[int, Outcome] = {}
        groups: dict[tuple[Any, ...], list[int]] = {}
        plans: dict[tuple[Any, ...], TrainPlan | None] = {}
        reprs: dict[int, str] = {}
        layouts = [Layout.of(job.share.module, reprs) for job in jobs]
        for i, job in enumerate(jobs):
            plan = planner(job.share)
            key = (layouts[i].architecture, plan)
            groups.setdefault(key, []).append(i)
            plans[key] = plan
        if len(groups) > 1:
            self._say(f"vectorised cohort: the wave holds {len(groups)} architectures or plans; each is vectorised "
                      f"apart")
        # the run's recorded choices (on a worker without the run: the copy its jobs carry)
        recorded = ctx.run.settings.get(CHOICES, {}) if ctx.run is not None else jobs[0].ctx.info.get(CHOICES, {})
        for key, members in groups.items():
            plan = plans[key]
            group = [jobs[i] for i in members]
            made: dict[str, Any] = {}
            why_not = ("the local update gives no plan for this share" if plan is None else
                       self._why_one_by_one(group, plan, key[0], recorded, made))
            if made and ctx.run is not None:
                ctx.run.settings.setdefault(CHOICES, {}).update(made)  # checkpointed: a resumed run repeats it
            if why_not is not None:
                self._say(f"vectorised cohort: {why_not}; training one by one", logging.INFO)
                chunks = [members]
            else:
                chunks = [members[s:s + self.chunk] for s in range(0, len(members), self.chunk)]
            for chunk in chunks:
                chosen = [jobs[i] for i in chunk]
                if why_not is not None or plan is None:
                    results = per_job.fedcore_train_cohort(jobs=chosen, ctx=ctx)
                else:
                    results = self._train_chunk(chosen, [layouts[i] for i in chunk], plan, ctx)
                if made and ctx.run is None:  # made where the run is out of reach (a Ray worker): the server
                    # records it when the updates arrive (fedcore_client_done)
                    results = [attrs.evolve(r, meta={**r.meta, "cohort_choice": made})
                               if isinstance(r, ClientUpdate) else r for r in results]
                for job, result in zip(chosen, results):
                    job.trained(result)  # observers (progress) follow chunk by chunk
                out.update(zip(chunk, results))
        return [out[i] for i in range(len(jobs))]

    # -- deciding ---------------------------------------------------------------------------

    def _planner(self, job: ClientJob) -> tuple[Callable[[Share], TrainPlan | None] | None, str]:
        """The local update's ``vectorised_plan``, if it states one for the very class that trains."""
        pipeline = job.hooks.pipeline
        update = pipeline.provider("local_update")
        if _defined_in(type(update), "vectorised_plan") is not _defined_in(type(update), "fedcore_local_update"):
            return None, (f"the local update {_name(update)!r} states no vectorised_plan for its own "
                          f"fedcore_local_update (fedcore.training.TrainPlan)")
        impls = pipeline.plugin_manager.hook.fedcore_local_update.get_hookimpls()
        wrappers = [_name(i.plugin) for i in impls if i.wrapper]
        if wrappers:
            return None, f"the local update is wrapped by {', '.join(wrappers)}"
        return update.vectorised_plan, ""

    def _why_one_by_one(self, group: list[ClientJob], plan: TrainPlan, shape: tuple[Any, ...],
                        recorded: dict[str, Any], made: dict[str, Any]) -> str | None:
        """Why this group trains one by one, or ``None``. A choice made here (not replayed) lands in ``made``."""
        module = group[0].share.module
        if len(group) < 2:
            return "a lone client of its architecture"
        if not any(p.requires_grad for p in module.parameters()):
            return "the share has no trainable parameter"
        device = next(module.parameters()).device
        if device.type != "cpu" or self.on_cpu == "vectorise":
            return None
        if self.on_cpu == "one-by-one":
            return "on_cpu = 'one-by-one'"
        key = cohort_probe.group_key(module, plan, shape)
        record = recorded.get(key)
        if record is None:
            record = made[key] = self._choice(key, group, plan)
        if record["choice"] == cohort_probe.VECTORISE:
            return None
        timed = ("" if record.get("one_by_one_ms") is None else
                 f"; {record['clients']} clients x {record.get('steps', 1)} steps took "
                 f"{record['one_by_one_ms']:.1f} ms of CPU one by one, "
                 + ("failed" if record.get("vectorised_ms") is None else f"{record['vectorised_ms']:.1f} ms")
                 + " vectorised")
        return (f"on the CPU, one by one is as fast or faster for {key} (on_cpu = 'auto', {record['by']}{timed}; "
                f"pin it with on_cpu = 'vectorise' or 'one-by-one')")

    def _choice(self, key: str, group: list[ClientJob], plan: TrainPlan) -> dict[str, Any]:
        """``on_cpu = "auto"`` for a model the run has no choice for: this machine's cached probe, or a new probe."""
        module = group[0].share.module
        where = cohort_probe.machine(next(module.parameters()).device)
        record = cohort_probe.cached(key, where)
        if record is not None:
            record = {**record, "by": "cached probe"}
        else:
            first = group[0]
            x, y = next(batches(first.dataset, first.pool[:plan.batch_size], plan.batch_size, shuffle=False))
            clients = min(len(group), self.chunk, cohort_probe.PROBE_CLIENTS)
            pool = sum(len(job.pool) for job in group) / len(group)
            steps = min(cohort_probe.PROBE_STEPS, plan.epochs * max(1, round(pool / plan.batch_size)))
            timed = cohort_probe.probe(module, plan, x, y, clients, steps=steps, pad=not batch_coupled(module))
            record = {**cohort_probe.remember(key, where, {**timed, "by": "probe"}), "by": "probe"}
        record = {k: record[k] for k in ("choice", "by", "one_by_one_ms", "vectorised_ms", "clients", "steps")
                  if k in record}
        record.update(threads=where["threads"], device=where["device"])
        if record["choice"] == cohort_probe.VECTORISE:  # the other choice is said as the reason to train one by one
            log.info("vectorised cohort: vectorising %s on the CPU (on_cpu = 'auto', %s: %s)", key, record["by"],
                     record)
        return record

    def _say(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self._said:
            self._said.add(message)
            log.log(level, message)

    # -- training ---------------------------------------------------------------------------

    def _train_chunk(self, jobs: list[ClientJob], layouts: list[Layout], update: TrainPlan, ctx: RoundContext
                     ) -> list[Outcome]:
        """Select each client's data as it would alone, then train the ones that selected without error together."""
        from fedcore.runtime.job_rng import seed_torch

        out: list[Outcome | None] = [None] * len(jobs)
        ready: list[tuple[int, Sequence[int], torch.Tensor]] = []
        for i, job in enumerate(jobs):
            try:
                with torch.random.fork_rng(devices=[]):
                    seed_torch(job.ctx.seed_for("torch"))
                    chosen = job.select_data()
                    ready.append((i, chosen, torch.random.get_rng_state()))
            except Exception:  # as the per-job cohort: a failing client is reported, the others go on
                out[i] = ClientFailed(client_id=job.client.id, error=traceback.format_exc())
        trained: list[Outcome] | None = None
        try:
            trained = self._fit([jobs[i] for i, _, _ in ready], [layouts[i] for i, _, _ in ready],
                                [c for _, c, _ in ready], [s for _, _, s in ready], update)
        except Exception as exc:  # an op torch.func cannot batch (random ops but nn.Dropout, ...): one by one
            self._say(f"vectorised cohort: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}; "
                      f"training one by one", logging.WARNING)
        if trained is None:  # nothing of the failed attempt reached the modules: they are trained afresh
            trained = PerJobCohort().fedcore_train_cohort(jobs=[jobs[i] for i, _, _ in ready], ctx=ctx)
        for (i, _, _), result in zip(ready, trained):
            out[i] = result
        assert all(o is not None for o in out)
        return [o for o in out if o is not None]

    def _fit(self, jobs: list[ClientJob], layouts: list[Layout], chosen: list[Sequence[int]],
             rng_states: list[torch.Tensor], update: TrainPlan) -> list[Outcome]:
        if not jobs:
            return []
        modules = [job.share.module for job in jobs]
        streams = []
        for job, indices in zip(jobs, chosen):
            shuffle = job.ctx.rng("shuffle")
            streams.append([b for _ in range(update.epochs)
                            for b in batches(job.dataset, indices, update.batch_size, generator=shuffle)])
        template = modules[0]  # functional_call swaps its tensors in and back: it is only the program
        if any(type(m) is nn.Dropout and float(m.p) > 0 for m in template.modules()):
            template = clone_module(template)  # its dropouts are replaced by given masks
        template.train()
        sample = next((s[0][0] for s in streams if s), None)
        with uncounted():
            sites = replace_dropout(template, sample) if sample is not None else []
        generators = []
        for state in rng_states:
            gen = torch.Generator()
            gen.set_state(state)
            generators.append(gen)
        named = [layout.params for layout in layouts]
        owned = [layout.buffers for layout in layouts]
        train = {k: torch.stack([n[k].detach() for n in named]) for k, p in named[0].items() if p.requires_grad}
        shared, frozen = {}, {}
        for k, p in named[0].items():
            if not p.requires_grad:  # one frozen backbone (share_frozen_copy: the same tensor) stays unstacked
                if all(n[k] is p or torch.equal(n[k], p) for n in named[1:]):
                    if template is not modules[0]:  # else the template holds it: nothing to swap in
                        shared[k] = p.detach()
                else:
                    frozen[k] = torch.stack([n[k].detach() for n in named])
        buffers = {k: torch.stack([b[k] for b in owned]) for k in owned[0]}
        run = StackedRun(template=template, train=train, frozen=frozen, shared=shared, buffers=buffers, streams=streams,
                         optimizer=StackedOptimizer(name=update.optimizer, lr=update.lr, momentum=update.momentum,
                                                    weight_decay=update.weight_decay),
                         mu=update.mu, clip_norm=update.clip_norm, pad=not batch_coupled(template), dropout=sites,
                         generators=generators, device_seeds=[job.ctx.seed_for("torch") for job in jobs],
                         book=lambda i, n: book_samples(modules[i], n))
        with uncounted():
            losses = run.fit()
        results: list[Outcome] = []
        with torch.no_grad():
            for i, (job, module) in enumerate(zip(jobs, modules)):
                if not module.training:
                    module.train()
                for k in train:  # frozen entries were not changed
                    named[i][k].copy_(train[k][i])
                for k, b in owned[i].items():
                    b.copy_(buffers[k][i])
                values = {**{k: p.detach() for k, p in named[i].items()}, **owned[i]}  # no state_dict() walk
                if any(k not in values for k in job.share.upload):  # a module whose state_dict renames entries
                    values = module.state_dict()
                results.append(ClientUpdate.from_share(job.share, values, num_examples=len(chosen[i]),
                                                       metrics={"loss": losses[i]}, meta={"cohort": "vectorised"},
                                                       client_id=job.client.id))
        return results
