"""A dry run of :func:`~fedcore_split.train.train_split`: the per-batch messages it will send, without running it.

The same protocol as :mod:`fedcore_split.train`, step by step: per batch of ``b`` samples the bottom's output
``h`` (shape read by running the bottom on a meta batch) goes up and, for a U-shaped split, the server segment's
output comes down (shape read by running the server stages on ``h``); ``dL/db`` and ``dL/dh`` follow when the
client's bottom is trained by backprop or the rule needs them at that step (:meth:`ServerRule.needs_output_grad`);
``bottom_grad="zo"`` adds two extra forwards; loss queries follow where the rule asks for them
(:meth:`ServerRule.planned_queries`). A two-part split sends the labels up and gets the loss and ``dL/dh`` back.
Then the upload of ``share.upload``. ``tests/test_dry_run.py`` checks the bytes equal a real round's ledger.
"""
from __future__ import annotations

from collections import Counter

import torch

from fedcore.errors import ConfigError
from fedcore.types import JobPlan, Message, Share, upload_messages
from fedcore_split.endpoint import (
    INPUT_GRAD,
    LABELS,
    LOSS,
    LOSSES,
    OUTPUT_GRAD,
    QUERY_OUT,
    SERVER_OUT,
    SMASHED,
    ServerRule,
)
from fedcore_split.stages import Segment

NUMBER_BYTES = 8  # a Python number on the channel (fedcore.network.payload_nbytes)
LABEL_BYTES = 8  # int64 labels


def per_sample_bytes(share: Share, example: torch.Tensor) -> tuple[int, int]:
    """Bytes per sample of the smashed data ``h`` and of the server segment's output (meta forwards)."""
    module = share.module
    if not isinstance(module, Segment) or share.endpoint is None:
        raise ConfigError(f"a split plan needs a split share (a Segment with an endpoint); got "
                          f"{type(module).__name__}")
    rule: ServerRule = share.endpoint.rule
    key = (tuple(module.parts.items()), tuple(example.shape), example.dtype)
    known = rule.__dict__.setdefault("_planned_bytes", {})  # one round's rule serves every client: measure once
    if key not in known:
        with torch.no_grad():
            h = module.run("bottom", example)
            out = Segment(rule.model, {"server": rule.stages}, share=True).run("server", h) \
                if "top" in module.parts else h
        batch = int(example.shape[0])
        known[key] = (h.numel() * h.element_size() // batch, out.numel() * out.element_size() // batch)
    return known[key]


def batch_sizes(samples: int, batch_size: int, epochs: int) -> list[int]:
    """The sizes of the job's batches in order (the last batch of an epoch may be smaller)."""
    one = [batch_size] * (samples // batch_size) + ([samples % batch_size] if samples % batch_size else [])
    return one * epochs


def plan_split_job(share: Share, samples: int, example: torch.Tensor, *, epochs: int, batch_size: int,
                   bottom_grad: str = "backprop") -> JobPlan:
    """The :class:`~fedcore.types.JobPlan` of ``train_split(share, data of `samples`, epochs=..., batch_size=...)``."""
    h_bytes, b_bytes = per_sample_bytes(share, example)
    rule: ServerRule = share.endpoint.rule
    module = share.module
    assert isinstance(module, Segment)  # per_sample_bytes checked it
    two_part = "top" not in module.parts
    sizes = batch_sizes(samples, batch_size, epochs)
    sent: Counter[tuple[str, str, int]] = Counter()
    for step, b in enumerate(sizes, start=1):
        final = step == len(sizes)
        if two_part:
            sent.update({("up", SMASHED, b * h_bytes): 1, ("up", LABELS, b * LABEL_BYTES): 1,
                         ("down", LOSS, NUMBER_BYTES): 1, ("down", INPUT_GRAD, b * h_bytes): 1})
            continue
        sent.update({("up", SMASHED, b * h_bytes): 1, ("down", SERVER_OUT, b * b_bytes): 1})
        if bottom_grad == "backprop" or rule.needs_output_grad(final):
            sent.update({("up", OUTPUT_GRAD, b * b_bytes): 1, ("down", INPUT_GRAD, b * h_bytes): 1})
        if bottom_grad == "zo":
            sent.update({("up", SMASHED, b * h_bytes): 2, ("down", SERVER_OUT, b * b_bytes): 2})
        queries = rule.planned_queries(final, step)
        if queries:
            sent.update({("down", QUERY_OUT, queries * b * b_bytes): 1, ("up", LOSSES, queries * NUMBER_BYTES): 1})
    messages = [Message(direction=d, kind=k, nbytes=n, count=c) for (d, k, n), c in sent.items()]
    return JobPlan(messages=(*messages, *upload_messages(share)), train_samples=0, num_examples=samples,
                   steps=len(sizes), batch_size=min(batch_size, max(samples, 1)))


__all__ = ["batch_sizes", "per_sample_bytes", "plan_split_job"]
