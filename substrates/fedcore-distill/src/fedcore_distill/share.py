"""Split slot of a distillation run: the client's own edge CNN, and the server's logits as its only download.

The edge model lives in ``ClientState.tensors`` and never crosses the network. A client's first share is the
global model's edge template re-initialised from a per-client seed (independent init, spec A18). From its
second round on, ``teacher_ids`` and ``teacher_logits`` (the server logits of the client's samples, which the
aggregator keeps for that client on the server-state channel, ``ServerState.aux``) come down with the share as
``share.aux``, booked as kinds ``sample_ids`` and ``logits``.
"""
from __future__ import annotations

from typing import ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import ConfigError, RoundContext
from fedcore.builtin import working_copy
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState, Share, Upload
from fedcore_distill.messages import DOWNLINK_KINDS, TEACHER_IDS, TEACHER_LOGITS, UPLINK_KINDS
from fedcore_distill.models import EdgeCNN, KDSystem

EDGE_PREFIX = "edge."


class EdgeClient(nn.Module):
    """What a client holds in a round: its edge CNN. The server's logits of its samples come with the share
    (``share.aux``, see :func:`teacher_of`); only a dry run's share of a later round holds them as buffers, so that
    the plan prices their download."""

    edge: EdgeCNN

    def __init__(self, edge: EdgeCNN, num_teacher: int = 0, num_classes: int = 0) -> None:
        super().__init__()
        self.edge = edge
        if num_teacher:
            self.register_buffer(TEACHER_IDS, torch.zeros(num_teacher, dtype=torch.long))
            self.register_buffer(TEACHER_LOGITS, torch.zeros(num_teacher, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.edge(x)


def teacher_of(share: Share) -> tuple[torch.Tensor, torch.Tensor]:
    """The received ``(teacher_ids, teacher_logits)`` of a client's share; empty before the first server logits."""
    if TEACHER_IDS in share.aux:
        return share.aux[TEACHER_IDS], share.aux[TEACHER_LOGITS]
    buffers = dict(share.module.named_buffers())
    if TEACHER_IDS in buffers:  # a dry run's planned download
        return buffers[TEACHER_IDS], buffers[TEACHER_LOGITS]
    return torch.zeros(0, dtype=torch.long), torch.zeros(0, 0)


def reinit(module: nn.Module, seed: int) -> None:
    """Fresh weights from ``seed``: He-normal convs (as timm's ResNet), unit/zero norms, default linears."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                m.reset_parameters()


def require_kd_system(model: nn.Module, who: str) -> KDSystem:
    if not isinstance(model, KDSystem):
        raise ConfigError(f"{who} needs a distillation model (a fedcore_distill.KDSystem, e.g. model = "
                          f"\"kd.fedvkd\" or \"kd.fedgkt\"), got {type(model).__name__}")
    return model


def edge_of(model: KDSystem, state: ClientState, client_id: int, seed: int, same_init: bool = False) -> EdgeCNN:
    """Client ``client_id``'s edge CNN: its saved state, or (first time) a fresh init of the template."""
    edge = working_copy(model.edge)
    assert isinstance(edge, EdgeCNN)
    own = {k[len(EDGE_PREFIX):]: v for k, v in state.tensors.items() if k.startswith(EDGE_PREFIX)}
    if own:
        edge.load_state_dict(own)
    else:
        reinit(edge, derive_seed(seed, "edge-init", 0 if same_init else client_id))
    return edge


def _planned(system: KDSystem) -> bool:
    """Whether the global model is a dry run's (built on the meta device: shapes, no values)."""
    return next(system.server.parameters()).is_meta


def _classes(system: KDSystem) -> int:
    """The server's number of classes: the rows of its (last) head."""
    heads = [m for m in system.server.modules() if isinstance(m, nn.Linear)]
    return int(heads[-1].out_features)


@attrs.frozen(eq=False, kw_only=True)
class EdgeShare:
    """Split slot: the client's edge CNN; downloads only the server logits of its samples, uploads only
    sample ids, features, edge logits and labels."""

    uploads: ClassVar[Upload] = Upload.FEATURES
    """Sample ids, features, edge logits and labels: the edge weights never leave the client."""

    same_init: bool = setting(False, help="all clients start from the same edge weights (spec A18 option)")

    @classmethod
    def __fedcore_checks__(cls):  # type: ignore[no-untyped-def]
        from fedcore_distill.checks import distill_check_plan

        return distill_check_plan(cls, expected_failures={
            "check_split": "uploads computed features, logits and labels, which are not entries of the share's module"})

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        system = require_kd_system(model, "edge-share")
        edge = edge_of(system, state, client.id, ctx.seed if ctx.run is None else ctx.run.seed, self.same_init)
        teachers = num_classes = 0
        if ctx.round > 0 and _planned(system) and ctx.run is not None and ctx.run.partition is not None:
            # a dry run of a later round: no aggregation ran, but a real client would receive the server's logits of
            # the samples it uploaded (all of its own, every round), so the planned share downloads them
            teachers, num_classes = len(ctx.run.partition.train[client.id]), _classes(system)
        module = EdgeClient(edge, teachers, num_classes)
        download = (TEACHER_IDS, TEACHER_LOGITS) if teachers else ()
        return Share(module=module, download=download, upload=tuple(UPLINK_KINDS),
                     kinds={**UPLINK_KINDS, **DOWNLINK_KINDS},
                     meta={"cut": edge.cut, "feature_shape": list(system.feature_shape)})


__all__ = ["EDGE_PREFIX", "EdgeClient", "EdgeShare", "edge_of", "reinit", "require_kd_system", "teacher_of"]
