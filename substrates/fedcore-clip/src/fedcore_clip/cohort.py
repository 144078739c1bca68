"""The ``vectorised-prompt`` cohort: CoOp clients of one frozen CLIP trained together.

    cohort = {name = "vectorised-prompt"}       # in a TOML [pipeline], next to recipe = "promptfl"

The image tower is frozen, so the images every client of the wave has not encoded yet go through it in one
pass; at each local step the prompt contexts of all clients go through the text encoder in one call
(``[clients·K, L, d]``), and each client's loss, its SGD step with momentum and weight decay, and its cosine
learning rate are its own. Each client ends where :class:`~fedcore_clip.PromptUpdate` takes it alone
(within float rounding). Other local updates, and feature-less training (augmentation), run one by one.
"""
from __future__ import annotations

from collections.abc import Sequence
import logging
import math
import traceback
from typing import Any

import attrs
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

import fedcore
from fedcore import ClientFailed, ClientUpdate
from fedcore.builtin import PerJobCohort, StackedOptimizer
from fedcore.data import ArrayDataset, batches
from fedcore.runtime import active_placement
from fedcore.settings import setting
from fedcore_clip.features import FEATURES, SUPPORT, cached_features, encode_all, gather_labels
from fedcore_clip.learner import PromptedCLIP
from fedcore_clip.update import PromptUpdate

log = logging.getLogger("fedcore.cohort")


@attrs.frozen(kw_only=True)
class _Client:
    index: int
    job: Any
    model: PromptedCLIP
    indices: tuple[int, ...]
    labels: torch.Tensor
    feats: torch.Tensor
    stream: list[tuple[torch.Tensor, torch.Tensor]]
    lr: list[float]


@attrs.frozen(eq=False, kw_only=True)
class VectorisedPromptCohort:
    """Trains a wave's ``promptfl``-style clients (:class:`~fedcore_clip.PromptUpdate` with cached features) together.

    ``chunk`` bounds how many clients' prompts share one text-encoder call.
    """

    chunk: int = setting(64, low=1, help="most clients whose prompts go through the text encoder together")
    _said: set[str] = attrs.field(factory=set, init=False, repr=False)

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs: Sequence[Any], ctx: fedcore.RoundContext) -> list[Any]:
        per_job = PerJobCohort()
        update = jobs[0].hooks.pipeline.provider("local_update") if jobs else None
        reason = _unsupported(update)
        if reason is not None or len(jobs) < 2:
            if reason is not None and reason not in self._said:
                self._said.add(reason)
                log.warning("vectorised-prompt cohort: %s; training one by one", reason)
            return per_job.fedcore_train_cohort(jobs=jobs, ctx=ctx)
        assert isinstance(update, PromptUpdate)
        out: list[Any] = []
        for start in range(0, len(jobs), self.chunk):
            out.extend(self._train(list(jobs[start:start + self.chunk]), update))
        return out

    def _train(self, jobs: list[Any], update: PromptUpdate) -> list[Any]:
        out: list[Any] = [None] * len(jobs)
        chosen: list[tuple[int, tuple[int, ...]]] = []
        for i, job in enumerate(jobs):
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(job.ctx.seed_for("torch"))
                    chosen.append((i, tuple(int(k) for k in job.select_data())))
            except Exception:  # as one by one: a failing client is reported, the others go on
                out[i] = ClientFailed(client_id=job.client.id, error=traceback.format_exc())
        _encode_missing([jobs[i] for i, _ in chosen], [idx for _, idx in chosen])
        clients = []
        for i, indices in chosen:
            try:
                clients.append(_prepare(i, jobs[i], indices, update))
            except Exception:
                out[i] = ClientFailed(client_id=jobs[i].client.id, error=traceback.format_exc())
        if clients:
            losses = _fit(clients, update)
            for c, loss in zip(clients, losses):
                out[c.index] = _finish(c, loss)
        return out


def _unsupported(update: Any) -> str | None:
    if not isinstance(update, PromptUpdate) or _defined_in(type(update), "fedcore_local_update") is not PromptUpdate:
        return f"the local update {type(update).__name__} is not PromptUpdate's CoOp loop"
    if not update.cache_features:
        return "cache_features = false (augmented images are encoded per step)"
    if active_placement().precision == "fp16":
        return ("precision='fp16' scales each client's loss on its own (torch.amp.GradScaler), which one batched "
                "step does not")
    return None


def _defined_in(cls: type, attribute: str) -> type | None:
    return next((c for c in cls.__mro__ if attribute in vars(c)), None)


def _encode_missing(jobs: list[Any], chosen: list[tuple[int, ...]]) -> None:
    """One image-tower pass over every image some client of the wave has not cached yet (one per backbone)."""
    by_backbone: dict[int, list[tuple[dict[int, torch.Tensor], int]]] = {}
    backbones: dict[int, Any] = {}
    for job, indices in zip(jobs, chosen):
        model = job.share.module
        if not isinstance(model, PromptedCLIP):
            continue
        key = ("train", len(job.dataset), model.backbone.fingerprint())
        rows = job.state.stash.setdefault(FEATURES, {}).setdefault(key, {})
        backbones[id(model.backbone)] = (model.backbone, job.dataset)
        by_backbone.setdefault(id(model.backbone), []).extend((rows, i) for i in indices if i not in rows)
    for bid, wanted in by_backbone.items():
        backbone, dataset = backbones[bid]
        unique = sorted({i for _, i in wanted})
        if unique:
            feats = dict(zip(unique, encode_all(backbone, dataset, unique)))
            for rows, i in wanted:
                rows[i] = feats[i]


def _prepare(index: int, job: Any, indices: tuple[int, ...], update: PromptUpdate) -> _Client:
    """What ``PromptUpdate`` sets up for one client: labels, cached features, shuffled batches, per-step lr."""
    from fedcore_clip.share import require_prompted

    model = require_prompted(job.share.module, type(update).__name__)
    labels = gather_labels(job.dataset, indices)
    if len(labels) and int(labels.max()) >= model.prompt.num_classes:
        raise fedcore.ConfigError(f"client {job.client.id} has label {int(labels.max())} but the prompt has only "
                                  f"{model.prompt.num_classes} class names")
    feats = cached_features(job.state.stash, model.backbone, job.dataset, indices)
    labels = labels.to(feats.device)  # the logits' device (a GPU run's)
    n = len(labels)
    positions = ArrayDataset(torch.arange(n), labels)
    gen = job.ctx.rng("shuffle")
    stream = [b for _ in range(update.epochs) for b in batches(positions, range(n), update.batch_size, generator=gen)]
    spe = max(1, math.ceil(n / update.batch_size))
    total, warm = update.epochs * spe, update.warmup_epochs * spe

    def lr_at(step: int) -> float:  # train_prompt's schedule
        if step < warm:
            return 1e-5
        if update.schedule == "cosine":
            return 0.5 * update.lr * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
        return update.lr

    return _Client(index=index, job=job, model=model, indices=indices, labels=labels, feats=feats, stream=stream,
                   lr=[lr_at(k) for k in range(len(stream))])


def _fit(clients: list[_Client], update: PromptUpdate) -> list[float]:
    template = clients[0].model
    names = [n for n, p in template.prompt.named_parameters() if p.requires_grad]
    stacked = {n: torch.stack([dict(c.model.prompt.named_parameters())[n].detach() for c in clients]) for n in names}
    anchor = {n: v.clone() for n, v in stacked.items()}
    mu = update.proximal_mu()
    opt = StackedOptimizer(name="sgd", lr=update.lr, momentum=update.momentum, weight_decay=update.weight_decay)
    scale = template.backbone.logit_scale()
    sums, seen = [0.0] * len(clients), [0] * len(clients)
    pending: list[tuple[int, int, torch.Tensor]] = []  # read back once at the end: no GPU sync per step
    for k in range(max(len(c.stream) for c in clients)):
        active = [i for i, c in enumerate(clients) if k < len(c.stream)]
        leaves = {n: v[active].clone().requires_grad_(True) for n, v in stacked.items()}
        prompts = [functional_call(clients[i].model.prompt, {n: leaves[n][j] for n in names}, ())
                   for j, i in enumerate(active)]
        ids = torch.cat([clients[i].model.prompt.tokenized for i in active])
        lengths = [getattr(clients[i].model.prompt, "text_length", None) for i in active]
        length = None if None in lengths else max(int(n) for n in lengths if n is not None)
        text = F.normalize(template.backbone.encode_prompts(torch.cat(prompts), ids, length), dim=-1)
        text = text.reshape(len(active), -1, text.shape[-1])
        total: Any = 0
        values = []
        for j, i in enumerate(active):
            pos, y = clients[i].stream[k]
            value = nn.functional.cross_entropy(scale * clients[i].feats[pos] @ text[j].t(), y)
            values.append(value)
            term = value
            if mu is not None:
                term = value + 0.5 * float(mu) * sum(((leaves[n][j] - anchor[n][i]) ** 2).sum() for n in names)
            total = total + term
        total.backward()
        grads = {n: leaves[n].grad for n in names}
        by_lr: dict[float, list[int]] = {}
        for j, i in enumerate(active):
            by_lr.setdefault(clients[i].lr[k], []).append(j)
        for lr, members in by_lr.items():
            opt.lr = lr
            rows = torch.tensor([active[j] for j in members])
            opt.step(stacked, {n: g[members] for n, g in grads.items() if g is not None}, rows, k)
        pending += [(i, len(clients[i].stream[k][1]), values[j].detach()) for j, i in enumerate(active)]
    if pending:  # the sums run in each client's step order, as before
        for (i, n_b, _), value in zip(pending, torch.stack([v for _, _, v in pending]).tolist()):
            sums[i] += float(value) * n_b
            seen[i] += n_b
    with torch.no_grad():
        for i, c in enumerate(clients):
            params = dict(c.model.prompt.named_parameters())
            for n in names:
                params[n].copy_(stacked[n][i])
    return [s / max(n, 1) for s, n in zip(sums, seen)]


def _finish(c: _Client, loss: float) -> ClientUpdate:
    """``PromptUpdate``'s bookkeeping after training: the support set, the personal context, the upload."""
    job, model = c.job, c.model
    job.state.stash[SUPPORT] = c.indices
    params = dict(model.named_parameters())
    for name in model.personal_names():
        job.state.tensors[name] = params[name].detach().clone()
    return ClientUpdate(client_id=job.client.id, tensors={k: params[k].detach().clone() for k in job.share.upload},
                        num_examples=len(c.indices), metrics={"loss": loss})
