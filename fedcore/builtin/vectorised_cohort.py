"""The ``vectorised`` cohort: whole-model clients of one architecture trained together with ``torch.func``.

    cohort = {name = "vectorised"}             # in a TOML [pipeline]; or VectorisedCohort() in Python

Each client ends where the ``sgd`` local update would have taken it alone (within float rounding): the same
selected data, the same shuffled batches (its own ``ctx.rng("shuffle")``), the same dropout masks (its own
seeded stream), the same BatchNorm statistics, the same ``torch.optim`` arithmetic. What cannot be
vectorised falls back to the one-by-one ``per-job`` cohort, and the log says why once per reason.
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
    from fedcore.engine.client_job import ClientJob

log = logging.getLogger("fedcore.cohort")

Outcome = ClientUpdate | ClientFailed


def _defined_in(cls: type, attribute: str) -> type | None:
    return next((c for c in cls.__mro__ if attribute in vars(c)), None)


def _name(component: Any) -> str:
    entry = fedcore.plugins.registry().find(component)
    return entry.name if entry is not None else type(component).__name__


def batch_coupled(module: nn.Module) -> bool:
    """Whether a layer mixes the samples of a batch in training (BatchNorm): then padding would change it."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def convolutional(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules())


FP16_ONE_BY_ONE = ("precision='fp16' scales each client's loss on its own (torch.amp.GradScaler skips the steps that "
                   "overflow), which the batched computation does not do")
"""Why fp16 runs one by one (bf16 and fp32 are vectorised)."""

CPU_CONV_FLOPS = 2e6
"""On the CPU, a convolutional model is vectorised only up to this many forward FLOPs per sample.

Measured on the 2-core development machine (``benchmarks/vectorised_cifar10.py``): a 1x8x8 micro CNN
(~6 kFLOPs) ran 3.5x faster vectorised, pfl's CIFAR-10 CNN (~35 MFLOPs) 0.8x: ``vmap`` turns a convolution
into a grouped one, which the CPU kernels run slowly, while small models are bound by per-call overhead.
Linear layers batch into ``bmm`` and always win. A fixed rule, not a timing probe, so that the choice
(and so the history, to the last bit) is the same on every run.
"""


def forward_flops(module: nn.Module, sample: torch.Tensor) -> int:
    """FLOPs of one forward of ``module`` on ``sample`` (a batch of one), counted by torch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = module.training
    counter = FlopCounterMode(display=False)
    try:
        module.eval()
        with uncounted(), torch.no_grad(), counter:
            module(sample)
    finally:
        module.train(was_training)
    return int(counter.get_total_flops())


def architecture(module: nn.Module) -> tuple[Any, ...]:
    """What two modules must share to be stepped in one batched forward: layers, settings, state shapes."""
    return (tuple((type(m), m.extra_repr()) for m in module.modules()),
            tuple((n, tuple(p.shape), p.dtype, p.requires_grad, p.device) for n, p in module.named_parameters()),
            tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers()))


@attrs.frozen(eq=False, kw_only=True)
class VectorisedCohort:
    """Trains a wave's whole-model clients together: stacked parameters, ``functional_call``, ``vmap`` over ``grad``.

    Clients with the same architecture are trained ``chunk`` at a time (one batched forward and backward
    per local step; lower ``chunk`` when memory runs short); unequal local data is padded and masked. The
    local update must be the built-in ``sgd`` (SGD with momentum or Adam, weight decay, FedProx ``mu``)
    with no wrapper around it; anything else runs one by one (``per-job``). On the CPU, batched
    convolutions are slower than one client after another, so ``on_cpu = "auto"`` vectorises only
    convolution-free models there; on an accelerator it always vectorises.
    """

    chunk: int = setting(64, low=1, help="most clients stepped in one batched computation (bounds memory)")
    on_cpu: str = setting("auto", choices=("auto", "vectorise", "one-by-one"),
                          help="on the CPU: vectorise convolution-free models only (auto), always, or never")
    _said: set[str] = attrs.field(factory=set, init=False, repr=False)

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
        for i, job in enumerate(jobs):
            plan = planner(job.share)
            key = (architecture(job.share.module), plan)
            groups.setdefault(key, []).append(i)
            plans[key] = plan
        if len(groups) > 1:
            self._say(f"vectorised cohort: the wave holds {len(groups)} architectures or plans; each is vectorised "
                      f"apart")
        for key, members in groups.items():
            plan = plans[key]
            first = jobs[members[0]]
            sample = first.dataset[first.pool[0]][0] if first.pool else None
            why_not = ("the local update gives no plan for this share" if plan is None else
                       self._why_one_by_one(first.share.module, len(members),
                                            None if sample is None else torch.as_tensor(sample).unsqueeze(0)))
            if why_not is not None:
                self._say(f"vectorised cohort: {why_not}; training one by one", logging.INFO)
                chunks = [members]
            else:
                chunks = [members[s:s + self.chunk] for s in range(0, len(members), self.chunk)]
            for chunk in chunks:
                chosen = [jobs[i] for i in chunk]
                results = (per_job.fedcore_train_cohort(jobs=chosen, ctx=ctx) if why_not is not None or plan is None
                           else self._train_chunk(chosen, plan, ctx))
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

    def _why_one_by_one(self, module: nn.Module, clients: int, sample: torch.Tensor | None) -> str | None:
        if clients < 2:
            return "a lone client of its architecture"
        if not any(p.requires_grad for p in module.parameters()):
            return "the share has no trainable parameter"
        device = next(module.parameters()).device
        if device.type != "cpu" or self.on_cpu == "vectorise":
            return None
        if self.on_cpu == "one-by-one":
            return "on_cpu = 'one-by-one'"
        if convolutional(module) and sample is not None and forward_flops(module, sample) > CPU_CONV_FLOPS:
            return (f"batched convolutions of more than {CPU_CONV_FLOPS:.0e} FLOPs per sample are slower than "
                    f"one-by-one on the CPU (on_cpu = 'auto')")
        return None

    def _say(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self._said:
            self._said.add(message)
            log.log(level, message)

    # -- training ---------------------------------------------------------------------------

    def _train_chunk(self, jobs: list[ClientJob], update: TrainPlan, ctx: RoundContext) -> list[Outcome]:
        """Select each client's data as it would alone, then train the ones that selected without error together."""
        from fedcore.engine.client_job import seed_torch

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
            trained = self._fit([jobs[i] for i, _, _ in ready], [c for _, c, _ in ready],
                                [s for _, _, s in ready], update)
        except Exception as exc:  # an op torch.func cannot batch (random ops but nn.Dropout, ...): one by one
            self._say(f"vectorised cohort: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}; "
                      f"training one by one", logging.WARNING)
        if trained is None:  # nothing of the failed attempt reached the modules: they are trained afresh
            trained = PerJobCohort().fedcore_train_cohort(jobs=[jobs[i] for i, _, _ in ready], ctx=ctx)
        for (i, _, _), result in zip(ready, trained):
            out[i] = result
        assert all(o is not None for o in out)
        return [o for o in out if o is not None]

    def _fit(self, jobs: list[ClientJob], chosen: list[Sequence[int]], rng_states: list[torch.Tensor],
             update: TrainPlan) -> list[Outcome]:
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
        named = [dict(m.named_parameters()) for m in modules]
        train = {k: torch.stack([n[k].detach() for n in named]) for k, p in named[0].items() if p.requires_grad}
        shared, frozen = {}, {}
        for k, p in named[0].items():
            if not p.requires_grad:
                if all(n[k] is p or torch.equal(n[k], p) for n in named[1:]):
                    shared[k] = p.detach()
                else:
                    frozen[k] = torch.stack([n[k].detach() for n in named])
        buffers = {k: torch.stack([dict(m.named_buffers())[k] for m in modules]) for k, _ in modules[0].named_buffers()}
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
                module.train()
                for k, p in module.named_parameters():
                    if k not in shared:
                        p.copy_((train if k in train else frozen)[k][i])
                for k, b in module.named_buffers():
                    b.copy_(buffers[k][i])
                results.append(ClientUpdate.from_share(job.share, num_examples=len(chosen[i]),
                                                       metrics={"loss": losses[i]}, client_id=job.client.id))
        return results
