"""Edge-to-server knowledge distillation for fedcore (FedGKT, FedVKD and later feature-exchange methods).

Components: ``edge-share`` (split), ``edge-kd-train`` (local update), ``kd-server`` (aggregate), ``kd-eval``
(evaluate), ``p-group`` (partition). Models: ``kd.fedvkd``, ``kd.fedgkt``, ``kd.fedavg-vit``, ``kd.fedavg-cnn``,
``kd.edge``. Data: ``kd.synth-patterns``. The recipes live in the method plugins (``fedcore-fedvkd``,
``fedcore-fedgkt``).
"""
from __future__ import annotations

from fedcore_distill.costs import bytes_by_kind, forward_macs, num_params, train_macs
from fedcore_distill.edge import EDGE_OPTIMIZER, EdgeKDTrain, augment, fetch
from fedcore_distill.evaluate import KDEval, server_heads
from fedcore_distill.losses import hard_distill_targets, soft_kd, two_head_loss
from fedcore_distill.messages import (
    DOWNLINK_KINDS,
    FEATURES,
    LABELS,
    LOGITS,
    SAMPLE_IDS,
    TEACHER_IDS,
    TEACHER_LOGITS,
    UPLINK_KINDS,
    FeaturePacket,
    check_feature_shapes,
    teacher_lookup,
)
from fedcore_distill.models import (
    BottleneckServer,
    EdgeCNN,
    KDSystem,
    cut_resnet,
    edge_resnet,
    feature_shape,
    token_vit,
)
from fedcore_distill.pgroup import PGroupPartition, class_to_group
from fedcore_distill.server import SERVER_OPTIMIZER, SERVER_SCHEDULER, KDServer
from fedcore_distill.share import EDGE_PREFIX, EdgeClient, EdgeShare, edge_of, reinit, require_kd_system, teacher_of
from fedcore_distill.synth import synth_patterns, synth_patterns_dataset
from fedcore_distill.zoo import (
    edge_model,
    fedavg_cnn_model,
    fedavg_vit_model,
    fedgkt_model,
    fedvkd_model,
    paper_models,
)

__all__ = [
    "DOWNLINK_KINDS", "EDGE_OPTIMIZER", "EDGE_PREFIX", "FEATURES", "LABELS", "LOGITS", "SAMPLE_IDS",
    "SERVER_OPTIMIZER", "SERVER_SCHEDULER", "TEACHER_IDS", "TEACHER_LOGITS", "UPLINK_KINDS", "BottleneckServer",
    "EdgeCNN", "EdgeClient", "EdgeKDTrain", "EdgeShare", "FeaturePacket", "HybridViT", "KDEval", "KDServer",
    "KDSystem", "PGroupPartition", "augment", "bytes_by_kind", "check_feature_shapes", "class_to_group",
    "cut_resnet", "edge_model", "edge_of", "edge_resnet", "fedavg_cnn_model", "fedavg_vit_model", "fedgkt_model",
    "fedvkd_model", "feature_shape", "fetch", "forward_macs", "hard_distill_targets", "num_params", "paper_models",
    "reinit", "require_kd_system", "server_heads", "soft_kd", "synth_patterns",
    "synth_patterns_dataset", "teacher_lookup", "teacher_of", "token_vit", "train_macs", "two_head_loss",
]


def __getattr__(name: str) -> object:  # HybridViT subclasses a timm class: importing the package must not import timm
    if name == "HybridViT":
        from fedcore_distill.hybrid_vit import HybridViT

        return HybridViT
    if name == "register":  # deprecated (0.1.1): registration lives in the entry point's module, fedcore loads it
        import warnings

        from fedcore_distill.plugin import fedcore_register_components

        warnings.warn("fedcore_distill.register is deprecated and removed in 1.0: fedcore registers the components "
                      "through the entry point fedcore_distill.plugin", DeprecationWarning, stacklevel=2)
        return fedcore_register_components
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

