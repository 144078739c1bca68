"""Models from timm: an edge ResNet cut into extractor + classifier and FedGKT's bottleneck-ResNet server, plus
the composed global models (the hybrid ViT server, a timm subclass, is :mod:`fedcore_distill.hybrid_vit`).

Micro sizes (the defaults of the named factories) run on a CPU; paper sizes (ResNet-18 width 64, ViT-B,
ResNet-109) are instantiable with random weights. ``pretrained=True`` loads timm's weights where timm has them.
timm is imported inside the functions that build, so importing the substrate (registering it) stays light.
"""
from __future__ import annotations

from collections.abc import Sequence
import copy
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedcore import ConfigError

if TYPE_CHECKING:
    from timm.models.vision_transformer import VisionTransformer


class EdgeCNN(nn.Module):
    """The edge model ``f = classifier o extractor``; ``forward`` gives logits, ``features`` the uplink: the cut's
    output, or its patch embedding where the edge embeds (``embed``, spec A4 ``patch_embed_location="edge"``)."""

    def __init__(self, extractor: nn.Sequential, classifier: nn.Sequential, cut: str,
                 embed: nn.Module | None = None) -> None:
        super().__init__()
        self.extractor = extractor
        self.classifier = classifier
        self.cut = cut
        self.embed = embed

    def features(self, x: torch.Tensor) -> torch.Tensor:
        h = self.extractor(x)
        return h if self.embed is None else self.embed(h)

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.extractor(x)
        return self.classifier(h), (h if self.embed is None else self.embed(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.extractor(x))


def cut_resnet(net: nn.Module, cut: str) -> EdgeCNN:
    """Cut any timm ResNet after the stage named ``cut`` (``conv1`` ... ``layer4``, ``global_pool``)."""
    names = [n for n, _ in net.named_children()]
    if cut not in names:
        raise ConfigError(f"cut={cut!r} is not a stage of {type(net).__name__}; choose one of {names}")
    at = names.index(cut) + 1
    children = dict(net.named_children())
    extractor = nn.Sequential(*(children[n] for n in names[:at]))
    classifier = nn.Sequential(*(children[n] for n in names[at:]))
    if not any(True for _ in classifier.parameters()):
        raise ConfigError(f"cut={cut!r} leaves no classifier after it (stages after it: {names[at:]}); "
                          f"cut before {names[-1]!r}")
    return EdgeCNN(extractor, classifier, cut)


EDGE_HEADS = ("resnet18_rest", "light")
"""Spec 002 Sec. 1.2 / A3: the edge classifier ``W_c``, the rest of the ResNet after the cut (the edge is a whole
ResNet-18) or FedGKT's light head (one BasicBlock at the cut's width, global average pool, FC)."""


def light_head(channels: int, num_classes: int) -> nn.Sequential:
    """FedGKT-style cheapest edge classifier: one BasicBlock (``channels`` in and out), GAP, FC."""
    from timm.models.resnet import BasicBlock

    return nn.Sequential(BasicBlock(channels, channels), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(channels, num_classes))


def edge_resnet(*, num_classes: int = 10, arch: str = "resnet18", width: int = 64, stem: str = "cifar",
                cut: str = "layer1", pretrained: bool = False, edge_head: str = "resnet18_rest") -> EdgeCNN:
    """A timm ResNet (``arch``, channels ``width * (1, 2, 4, 8)``) cut after ``cut``, its classifier the rest of
    the ResNet (``edge_head="resnet18_rest"``) or :func:`light_head` (``"light"``).

    ``stem="cifar"``: 3x3 stride-1 first conv and no max-pool (32x32 inputs); ``"imagenet"``: timm's stem.
    """
    if stem not in ("cifar", "imagenet"):
        raise ConfigError(f"stem={stem!r}; choose 'cifar' or 'imagenet'")
    if edge_head not in EDGE_HEADS:
        raise ConfigError(f"edge_head={edge_head!r} is not allowed; choose one of: "
                          f"{', '.join(map(repr, EDGE_HEADS))}")
    import timm  # here, not at the top: registering the plugin must not import timm (docs/plugins.md)

    kwargs: dict[str, Any] = {} if width == 64 else {"channels": tuple(width * m for m in (1, 2, 4, 8)),
                                                     "stem_width": width}
    net = timm.create_model(arch, pretrained=pretrained, num_classes=num_classes, **kwargs)
    if stem == "cifar":
        conv1 = net.get_submodule("conv1")
        assert isinstance(conv1, nn.Conv2d), f"{arch}'s conv1 is a {type(conv1).__name__}"
        net.conv1 = nn.Conv2d(3, conv1.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    edge = cut_resnet(net, cut)
    if edge_head == "light":
        channels = feature_shape(edge, 32)[0]
        edge = EdgeCNN(edge.extractor, light_head(channels, num_classes), cut)
    return edge


def feature_shape(edge: EdgeCNN, image_size: int) -> tuple[int, int, int]:
    """The extractor's output shape for a ``3 x image_size x image_size`` input (probed on the meta device)."""
    meta = copy.deepcopy(edge.extractor).to("meta").eval()
    with torch.no_grad():
        shape = tuple(meta(torch.zeros(1, 3, image_size, image_size, device="meta")).shape[1:])
    if len(shape) != 3:
        raise ConfigError(f"the extractor (cut {edge.cut!r}) emits shape {shape}; a server needs a C x H x W map")
    return int(shape[0]), int(shape[1]), int(shape[2])


def token_vit(*, feature_shape: Sequence[int], num_classes: int, embed_dim: int = 768, depth: int = 12,
              num_heads: int = 12, patch_size: int = 4) -> VisionTransformer:
    """FedAvg(ViT)'s encoder: the same patch embedding and blocks, class token and ``head_cls`` only (A16)."""
    from timm.models.vision_transformer import VisionTransformer

    c, h, w = feature_shape
    return VisionTransformer(img_size=(h, w), patch_size=patch_size, in_chans=c, num_classes=num_classes,
                             embed_dim=embed_dim, depth=depth, num_heads=num_heads)


class BottleneckServer(nn.Module):
    """FedGKT's server CNN: ResNet-110's bottleneck stages (no first conv) on the edge's feature map, GAP + FC.

    ``layers=(12, 12, 12)``, ``planes=(16, 32, 64)`` is FedGKT's ResNet-109 (expansion 4).
    """

    def __init__(self, *, in_chans: int, num_classes: int, layers: Sequence[int] = (12, 12, 12),
                 planes: Sequence[int] = (16, 32, 64)) -> None:
        from timm.models.resnet import Bottleneck

        super().__init__()
        stages, inplanes = [], in_chans
        for i, (n, p) in enumerate(zip(layers, planes)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                down = None
                if stride != 1 or inplanes != p * Bottleneck.expansion:
                    down = nn.Sequential(nn.Conv2d(inplanes, p * Bottleneck.expansion, 1, stride, bias=False),
                                         nn.BatchNorm2d(p * Bottleneck.expansion))
                blocks.append(Bottleneck(inplanes, p, stride=stride, downsample=down))
                inplanes = p * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(h).mean(dim=(2, 3)))


class KDSystem(nn.Module):
    """The global model of a distillation run: the shared ``server`` and the ``edge`` template each client
    copies (and re-initialises). ``forward`` is ``server o edge.extractor`` (the template's)."""

    def __init__(self, server: nn.Module, edge: EdgeCNN, feature_shape: Sequence[int]) -> None:
        super().__init__()
        self.server = server
        self.edge = edge
        self.feature_shape = tuple(feature_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.server(self.edge.features(x))
        return (out[0] + out[1]) / 2 if isinstance(out, tuple) else out


__all__ = ["EDGE_HEADS", "BottleneckServer", "EdgeCNN", "KDSystem", "cut_resnet", "edge_resnet", "feature_shape",
           "light_head", "token_vit"]
