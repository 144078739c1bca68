"""Reconstructing a client's input from what crossed the network, and how good a reconstruction is.

An honest-but-curious server of a split model sees, per batch, the smashed data ``h = bottom(x)``
and (with back-propagation) the output gradient ``g = dL/db``; a zeroth-order variant sends only loss
values. :class:`TranscriptTap` (an observer) keeps each client's transcript of a round (the messages
the :class:`~fedcore_split.endpoint.Connection` sent, recorded with ``record_messages=True``) and the
global model as the round began, which is what the server knows about the client's segments (exact
in a round in which the client downloads the global segments, e.g. FedV's round 0 or any SplitFed round).

Three attacks, each using one channel only, so their results say which channel leaks:

* :func:`invert_smashed`: optimise ``x'`` until ``bottom(x') = h`` (the smashed-data channel; the same
  in every split method that sends ``h``).
* :func:`invert_gradient`: DLG / inverting-gradients (Zhu et al. 2019; Geiping et al. 2020): optimise
  a dummy input and soft labels until ``dL/db`` of ``top(server(bottom(x')))`` matches the observed ``g``.
  It never looks at ``h``.
* :func:`invert_losses`: the same, matching only the loss values that crossed (all a server that
  receives no gradient can use besides ``h``).

:func:`quality` scores a reconstruction (MSE, PSNR, a global SSIM per image) and :func:`baselines`
gives the same scores for guesses that saw nothing (uniform noise, a public mean image).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import copy
from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.rng import torch_generator
from fedcore_split.endpoint import LOSSES, OUTPUT_GRAD, SMASHED
from fedcore_split.state import server_state

Fn = Callable[[torch.Tensor], torch.Tensor]


# -- quality of a reconstruction -------------------------------------------------------------------

def mse(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-image mean squared error."""
    return ((x_hat - x) ** 2).flatten(1).mean(1)


def psnr(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Per-image peak signal-to-noise ratio in dB (capped at 100 dB for exact copies)."""
    return (10 * torch.log10(data_range ** 2 / mse(x_hat, x).clamp_min(1e-10))).clamp(max=100.0)


def ssim(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Per-image SSIM over one window covering the whole (tiny) image; 1 = identical, ~0 = unrelated."""
    a, b = x_hat.flatten(1).double(), x.flatten(1).double()
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    ma, mb = a.mean(1), b.mean(1)
    va, vb = a.var(1, unbiased=False), b.var(1, unbiased=False)
    cov = ((a - ma[:, None]) * (b - mb[:, None])).mean(1)
    return (((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2))).float()


def quality(x_hat: torch.Tensor, x: torch.Tensor, data_range: float = 1.0) -> dict[str, float]:
    """Mean MSE, PSNR (dB) and SSIM over the images of a batch."""
    x_hat = x_hat.detach().clamp(0, data_range)
    return {"mse": float(mse(x_hat, x).mean()), "psnr": float(psnr(x_hat, x, data_range).mean()),
            "ssim": float(ssim(x_hat, x, data_range).mean())}


def baselines(x: torch.Tensor, public_mean: torch.Tensor | None = None, *, seed: int = 0,
              data_range: float = 1.0) -> dict[str, dict[str, float]]:
    """Scores of guesses made without any message: uniform noise, and (if given) a public mean image."""
    gen = torch_generator(seed, "inversion-random-guess")
    out = {"random": quality(torch.rand(x.shape, generator=gen) * data_range, x, data_range)}
    if public_mean is not None:
        out["public-mean"] = quality(public_mean.expand_as(x), x, data_range)
    return out


# -- what crossed --------------------------------------------------------------------------------

@attrs.define(kw_only=True)
class Observation:
    """One client's first batch as the server saw it: ``h``, ``dL/db`` (None if no gradient crossed), losses."""

    smashed: torch.Tensor
    output_grad: torch.Tensor | None
    losses: list[float]
    kinds: dict[str, int]


def observe(transcript: Sequence[tuple[str, Any]]) -> Observation:
    """The first batch's smashed data and output gradient, and every loss value, from a transcript.

    A batch's cached forward is the first ``smashed`` message of the batch and its ``output-grad``
    (when one is sent) comes before the next batch's messages, so the first of each kind belong to
    batch 1. ``losses`` are the loss values sent up (FedVZ's loss queries, at the last batch).
    """
    kinds: dict[str, int] = {}
    for kind, _ in transcript:
        kinds[kind] = kinds.get(kind, 0) + 1
    first = {kind: payload for kind, payload in reversed(list(transcript))}
    if SMASHED not in first:
        raise ValueError("the transcript holds no smashed data: was record_messages=True?")
    losses = [float(v) for kind, payload in transcript if kind == LOSSES for v in payload]
    grad = first.get(OUTPUT_GRAD)
    return Observation(smashed=first[SMASHED].detach(), output_grad=None if grad is None else grad.detach(),
                       losses=losses, kinds=kinds)


@attrs.define(kw_only=True, eq=False)
class TranscriptTap:
    """Observer: keeps each client's message transcript and the round-start global model (what the server knows).

    Add it to a pipeline whose split component has ``record_messages=True``; ``rounds`` limits which
    rounds are kept (memory). ``transcripts[(round, client)]`` and ``models[round]`` (a state dict).
    """

    rounds: tuple[int, ...] = (0,)
    transcripts: dict[tuple[int, int], list[tuple[str, Any]]] = attrs.field(factory=dict)
    models: dict[int, dict[str, torch.Tensor]] = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: Any) -> None:
        if ctx.round in self.rounds:
            self.models[ctx.round] = {k: v.detach().clone() for k, v in ctx.server.model.state_dict().items()}

    @fedcore.hookimpl
    def fedcore_client_done(self, client: Any, update: Any, ctx: Any) -> None:
        if ctx.round not in self.rounds:
            return
        srv = server_state(ctx)
        rule = srv.rule if srv.rule_round == ctx.round else None
        if rule is not None and client.id in rule.transcripts:
            self.transcripts[(ctx.round, client.id)] = list(rule.transcripts[client.id])


def white_box(model: nn.Module, state: dict[str, torch.Tensor], layout: dict[str, tuple[str, ...]]
              ) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    """``(bottom, server, top)`` segments of ``model`` loaded with ``state`` (the attacker's copy), in eval mode."""
    from fedcore_split.stages import Segment

    work = copy.deepcopy(model)
    work.load_state_dict(state)
    parts = [Segment(work, {"p": layout[k]}).eval() if layout[k] else None for k in ("bottom", "server", "top")]
    for p in parts:
        if p is not None:
            p.requires_grad_(False)
    bottom, server, top = parts
    if bottom is None or server is None:
        raise ValueError(f"white_box needs a bottom and a server segment; got the layout {layout}")
    return bottom, server, top


# -- the attacks ------------------------------------------------------------------------------------

def _dummy(shape: Sequence[int], num_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x_logit = (torch.randn(tuple(shape), generator=gen) * 0.1).requires_grad_(True)
    y_logit = (torch.randn(shape[0], num_classes, generator=gen) * 0.1).requires_grad_(True)
    return x_logit, y_logit


def _total_variation(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()


def invert_smashed(bottom: Fn, h: torch.Tensor, shape: Sequence[int], *, steps: int = 300, lr: float = 0.1,
                   seed: int = 0, data_range: float = 1.0) -> torch.Tensor:
    """``x'`` in ``[0, data_range]`` minimising ``||bottom(x') - h||^2`` (smashed-data inversion, known bottom)."""
    x_logit, _ = _dummy(shape, 1, seed)
    opt = torch.optim.Adam([x_logit], lr=lr)
    scale = h.detach().pow(2).mean().clamp_min(1e-12)
    for _ in range(steps):
        opt.zero_grad()
        loss = (bottom(torch.sigmoid(x_logit) * data_range) - h).pow(2).mean() / scale
        loss.backward()
        opt.step()
    return (torch.sigmoid(x_logit) * data_range).detach()


def _soft_ce(logits: torch.Tensor, y_logit: torch.Tensor) -> torch.Tensor:
    return -(torch.softmax(y_logit, -1) * torch.log_softmax(logits, -1)).sum(-1).mean()


def invert_gradient(forward: Fn, top: Fn, grad_b: torch.Tensor, shape: Sequence[int], num_classes: int, *,
                    steps: int = 300, lr: float = 0.1, tv: float = 1e-3, seed: int = 0, data_range: float = 1.0,
                    label_steps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DLG / iDLG on the output gradient: returns ``(x', labels')`` whose ``dL/db`` matches ``grad_b``.

    ``forward(x) = server(bottom(x))`` and ``top`` are the attacker's copies; ``L`` is the batch-mean
    cross-entropy of ``top(b)`` (the client's loss). First ``label_steps`` (default ``steps // 3``) of a
    joint search over ``x'`` and soft labels fix the labels (soft labels alone leave ``x'`` ambiguous),
    then ``x'`` is refined with those hard labels. The distance is ``1 - cos`` plus a relative L2 term
    (Geiping et al.), with a small total-variation prior on ``x'``.
    """
    x_logit, y_logit = _dummy(shape, num_classes, seed)
    target = grad_b.detach().flatten()
    norm = target.norm().clamp_min(1e-12)
    label_steps = steps // 3 if label_steps is None else label_steps

    def distance(x: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        b = forward(x)
        loss = -(soft * torch.log_softmax(top(b), -1)).sum(-1).mean()
        g = torch.autograd.grad(loss, b, create_graph=True)[0].flatten()
        return 1 - nn.functional.cosine_similarity(g, target, dim=0) + ((g - target).norm() / norm) ** 2

    opt = torch.optim.Adam([x_logit, y_logit], lr=lr)
    for _ in range(label_steps):
        opt.zero_grad()
        x = torch.sigmoid(x_logit) * data_range
        (distance(x, torch.softmax(y_logit, -1)) + tv * _total_variation(x)).backward()
        opt.step()
    labels = y_logit.detach().argmax(-1)
    hard = nn.functional.one_hot(labels, num_classes).float()
    opt = torch.optim.Adam([x_logit], lr=lr)
    for _ in range(steps - label_steps):
        opt.zero_grad()
        x = torch.sigmoid(x_logit) * data_range
        (distance(x, hard) + tv * _total_variation(x)).backward()
        opt.step()
    return (torch.sigmoid(x_logit) * data_range).detach(), labels


def invert_losses(forward: Fn, top: Fn, losses: Sequence[float], shape: Sequence[int], num_classes: int, *,
                  steps: int = 300, lr: float = 0.1, tv: float = 1e-3, seed: int = 0, data_range: float = 1.0
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same search matching only the batch's loss values (their mean; ``+-eps`` queries differ by ~eps)."""
    x_logit, y_logit = _dummy(shape, num_classes, seed)
    opt = torch.optim.Adam([x_logit, y_logit], lr=lr)
    target = torch.tensor(sum(losses) / max(len(losses), 1))
    for _ in range(steps):
        opt.zero_grad()
        x = torch.sigmoid(x_logit) * data_range
        loss = (_soft_ce(top(forward(x)), y_logit) - target) ** 2 + tv * _total_variation(x)
        loss.backward()
        opt.step()
    return (torch.sigmoid(x_logit) * data_range).detach(), y_logit.detach().argmax(-1)
