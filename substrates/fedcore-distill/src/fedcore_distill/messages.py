"""The feature-exchange protocol: what an edge sends up and what the server sends down, keyed by sample id.

Uplink (once per round, after local training): ``sample_ids``, ``features`` (the extractor's output),
``logits`` (the edge model's) and ``labels``. Downlink: ``teacher_ids`` and ``teacher_logits`` (the server's
logits for those samples). These are the only fields: no images, no weights, no gradients. Each field goes
through the client's channel under its ledger kind (:data:`UPLINK_KINDS`, :data:`DOWNLINK_KINDS`), so the
ledger counts every byte by kind.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import torch

from fedcore import ConfigError
from fedcore.types import ClientUpdate

SAMPLE_IDS, FEATURES, LOGITS, LABELS = "sample_ids", "features", "logits", "labels"
TEACHER_IDS, TEACHER_LOGITS = "teacher_ids", "teacher_logits"

UPLINK_KINDS: Mapping[str, str] = {SAMPLE_IDS: "sample_ids", FEATURES: "features", LOGITS: "logits", LABELS: "labels"}
"""Uplink entry -> ledger kind."""
DOWNLINK_KINDS: Mapping[str, str] = {TEACHER_IDS: "sample_ids", TEACHER_LOGITS: "logits"}
"""Downlink entry -> ledger kind (server-held per-client tensors on the server-state channel, ``ServerState.aux``)."""


@attrs.frozen(kw_only=True)
class FeaturePacket:
    """One client's uplink: per sample its id, extracted features, edge logits and label."""

    client_id: int
    sample_ids: torch.Tensor
    features: torch.Tensor
    logits: torch.Tensor
    labels: torch.Tensor

    def __attrs_post_init__(self) -> None:
        n = len(self.sample_ids)
        for name in (FEATURES, LOGITS, LABELS):
            if len(getattr(self, name)) != n:
                raise ConfigError(f"client {self.client_id}: {name} has {len(getattr(self, name))} rows, "
                                  f"sample_ids has {n}")

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.features.shape[1:])

    def entries(self) -> dict[str, torch.Tensor]:
        """The uplink as ``ClientUpdate.tensors`` (exactly :data:`UPLINK_KINDS`' fields)."""
        return {SAMPLE_IDS: self.sample_ids, FEATURES: self.features, LOGITS: self.logits, LABELS: self.labels}

    @classmethod
    def from_update(cls, update: ClientUpdate) -> FeaturePacket:
        t = update.tensors
        missing = sorted(set(UPLINK_KINDS) - set(t))
        if missing:
            raise ConfigError(f"client {update.client_id} uploaded {sorted(t)}; a feature packet needs {missing} too")
        return cls(client_id=update.client_id, sample_ids=t[SAMPLE_IDS].long(), features=t[FEATURES].float(),
                   logits=t[LOGITS].float(), labels=t[LABELS].long())


def check_feature_shapes(packets: Sequence[FeaturePacket], expected: tuple[int, ...] | None = None) -> None:
    """Every edge extractor must emit the same feature shape (FedVKD Sec. 3.1 (2)), and the server's if given."""
    if not packets:
        return
    reference = expected if expected is not None else packets[0].feature_shape
    where = "the server model expects" if expected is not None else f"client {packets[0].client_id} uploaded"
    for p in packets:
        if p.feature_shape != reference:
            raise ConfigError(f"client {p.client_id} uploaded features of shape {p.feature_shape}; {where} "
                              f"{reference}: every edge extractor must emit the same feature shape")


def teacher_lookup(client_id: int, teacher_ids: torch.Tensor, teacher_logits: torch.Tensor,
                   own_ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Server logits by sample id; ids the client does not hold are an error naming them."""
    known = set(own_ids.tolist())
    unknown = sorted(set(teacher_ids.tolist()) - known)
    if unknown:
        raise ConfigError(f"client {client_id} received server logits for sample ids {unknown[:8]} it does not "
                          f"hold ({len(unknown)} unknown)")
    return {int(i): row for i, row in zip(teacher_ids.tolist(), teacher_logits)}


__all__ = ["DOWNLINK_KINDS", "FEATURES", "LABELS", "LOGITS", "SAMPLE_IDS", "TEACHER_IDS", "TEACHER_LOGITS",
           "UPLINK_KINDS", "FeaturePacket", "check_feature_shapes", "teacher_lookup"]
