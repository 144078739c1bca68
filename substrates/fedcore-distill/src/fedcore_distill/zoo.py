"""Named models for configs (``model = { name = "kd.fedvkd", ... }``): micro sizes by default, paper sizes by
setting ``width=64``, ``embed_dim=768, depth=12, num_heads=12`` and ``server_layers=(12, 12, 12)``
(:func:`paper_models`)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
import functools
from typing import Any, TypeVar

import torch
from torch import nn

from fedcore import ConfigError
from fedcore_distill.models import BottleneckServer, EdgeCNN, KDSystem, edge_resnet, feature_shape, token_vit

M = TypeVar("M", bound=nn.Module)

PATCH_EMBED_LOCATIONS = ("server", "edge")
"""Spec 002 A4: where the ViT's patch embedding of the feature map runs."""


def _edge(num_classes: int, width: int, stem: str, cut: str, arch: str, pretrained: bool,
          edge_head: str = "resnet18_rest") -> EdgeCNN:
    return edge_resnet(num_classes=num_classes, arch=arch, width=width, stem=stem, cut=cut, pretrained=pretrained,
                       edge_head=edge_head)


def seeded(build: Callable[..., M]) -> Callable[..., M]:
    """The factory's random init drawn from ``seed`` (default 0), not from the global RNG: the same config
    builds the same model in every process (a resumed run, a contract check, another seed of a sweep)."""

    @functools.wraps(build)
    def wrapper(*args: Any, seed: int = 0, **kwargs: Any) -> M:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return build(*args, **kwargs)

    return wrapper


@seeded
def fedvkd_model(*, num_classes: int = 10, image_size: int = 16, width: int = 8, stem: str = "cifar",
                 cut: str = "layer1", arch: str = "resnet18", embed_dim: int = 128, depth: int = 4,
                 num_heads: int = 4, patch_size: int = 4, pretrained: bool = False,
                 edge_head: str = "resnet18_rest", patch_embed_location: str = "server") -> KDSystem:
    """FedVKD: edge ResNet cut after ``cut`` + the hybrid ViT server (cls + dist tokens) on its feature map.

    ``patch_embed_location="edge"`` (spec A4): the patch embedding (``Conv2d(C_f, embed_dim, P, stride P)``) runs on
    the edge, which uploads ``embed_dim x (H_f/P) x (W_f/P)`` token maps; the server's own embedding is the identity.
    No loss reaches the edge's embedding (the edge classifier reads the map before it and no gradient comes back
    from the server), so it keeps its initial weights, like a fixed random projection per client."""
    from fedcore_distill.hybrid_vit import HybridViT

    if patch_embed_location not in PATCH_EMBED_LOCATIONS:
        raise ConfigError(f"patch_embed_location={patch_embed_location!r} is not allowed; choose one of: "
                          f"{', '.join(map(repr, PATCH_EMBED_LOCATIONS))}")
    edge = _edge(num_classes, width, stem, cut, arch, pretrained, edge_head)
    shape = feature_shape(edge, image_size)
    if patch_embed_location == "server":
        server = HybridViT(feature_shape=shape, num_classes=num_classes, embed_dim=embed_dim, depth=depth,
                           num_heads=num_heads, patch_size=patch_size)
        return KDSystem(server, edge, shape)
    if shape[1] % patch_size or shape[2] % patch_size:
        raise ConfigError(f"patch_size={patch_size} does not divide the {shape[1]}x{shape[2]} feature map")
    embedded = (embed_dim, shape[1] // patch_size, shape[2] // patch_size)
    edge = EdgeCNN(edge.extractor, edge.classifier, edge.cut,
                   embed=nn.Conv2d(shape[0], embed_dim, kernel_size=patch_size, stride=patch_size))
    server = HybridViT(feature_shape=embedded, num_classes=num_classes, embed_dim=embed_dim, depth=depth,
                       num_heads=num_heads, patch_size=1)
    server.patch_embed.proj = nn.Identity()  # the tokens arrive embedded
    return KDSystem(server, edge, embedded)


@seeded
def fedgkt_model(*, num_classes: int = 10, image_size: int = 16, width: int = 8, stem: str = "cifar",
                 cut: str = "layer1", arch: str = "resnet18", server_layers: Sequence[int] = (3, 3, 3),
                 server_planes: Sequence[int] = (8, 16, 32), pretrained: bool = False,
                 edge_head: str = "resnet18_rest") -> KDSystem:
    """FedGKT (as in the FedVKD paper): the same edge + the bottleneck-ResNet server (ResNet-109 at paper size)."""
    edge = _edge(num_classes, width, stem, cut, arch, pretrained, edge_head)
    shape = feature_shape(edge, image_size)
    server = BottleneckServer(in_chans=shape[0], num_classes=num_classes, layers=server_layers, planes=server_planes)
    return KDSystem(server, edge, shape)


@seeded
def fedavg_vit_model(*, num_classes: int = 10, image_size: int = 16, width: int = 8, stem: str = "cifar",
                     cut: str = "layer1", arch: str = "resnet18", embed_dim: int = 128, depth: int = 4,
                     num_heads: int = 4, patch_size: int = 4, pretrained: bool = False) -> nn.Sequential:
    """FedAvg(ViT)'s global model: the edge extractor + the ViT encoder with a class token only (A16)."""
    edge = _edge(num_classes, width, stem, cut, arch, pretrained)
    shape = feature_shape(edge, image_size)
    return nn.Sequential(edge.extractor, token_vit(feature_shape=shape, num_classes=num_classes,
                                                   embed_dim=embed_dim, depth=depth, num_heads=num_heads,
                                                   patch_size=patch_size))


@seeded
def fedavg_cnn_model(*, num_classes: int = 10, image_size: int = 16, width: int = 8, stem: str = "cifar",
                     cut: str = "layer1", arch: str = "resnet18", server_layers: Sequence[int] = (3, 3, 3),
                     server_planes: Sequence[int] = (8, 16, 32), pretrained: bool = False) -> nn.Sequential:
    """FedAvg(CNN)'s global model: the edge extractor + the bottleneck server (ResNet-113 at paper size)."""
    edge = _edge(num_classes, width, stem, cut, arch, pretrained)
    shape = feature_shape(edge, image_size)
    return nn.Sequential(edge.extractor, BottleneckServer(in_chans=shape[0], num_classes=num_classes,
                                                          layers=server_layers, planes=server_planes))


@seeded
def edge_model(*, num_classes: int = 10, width: int = 8, stem: str = "cifar", cut: str = "layer1",
               arch: str = "resnet18", pretrained: bool = False,
               edge_head: str = "resnet18_rest") -> EdgeCNN:
    """The edge ResNet alone (FedAvg of the edge model, Fig. 5's baseline)."""
    return _edge(num_classes, width, stem, cut, arch, pretrained, edge_head)


def paper_models(image: str = "cifar") -> dict[str, nn.Module]:
    """Paper sizes, random init: ResNet-18 edge, ViT-B server, ResNet-109 server (``image``: cifar or imagenet)."""
    num_classes, size, stem = (10, 32, "cifar") if image == "cifar" else (1000, 224, "imagenet")
    vkd = fedvkd_model(num_classes=num_classes, image_size=size, width=64, stem=stem, embed_dim=768, depth=12,
                       num_heads=12)
    gkt = BottleneckServer(in_chans=vkd.feature_shape[0], num_classes=num_classes)
    fedavg_vit = nn.Sequential(vkd.edge.extractor, token_vit(feature_shape=vkd.feature_shape, num_classes=num_classes))
    return {"edge": vkd.edge, "extractor": vkd.edge.extractor, "vit_server": vkd.server, "resnet109": gkt,
            "fedavg_vit": fedavg_vit, "fedavg_cnn": nn.Sequential(vkd.edge.extractor, gkt)}


__all__ = ["PATCH_EMBED_LOCATIONS", "edge_model", "fedavg_cnn_model", "fedavg_vit_model", "fedgkt_model",
           "fedvkd_model", "paper_models"]
