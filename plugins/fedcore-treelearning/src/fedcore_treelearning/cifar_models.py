"""The thesis's four CNNs for CIFAR-10 (§3.6.1), at width x0.25 and cut into coarse units (spec A8.2, A9.1).

Used by the speed-up table and the resource table, which only profile them (FLOPs, activation bytes,
parameters on 32x32 inputs); nothing is trained. Units: VGG11 = 5 conv stages + classifier; MobileNet-v1 =
stem + 5 depthwise-separable groups + head; AlexNet = 5 conv + 3 fc; ResNet18 = stem, 4 stages, head.
"""
from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def _conv(cin: int, cout: int, stride: int = 1, groups: int = 1, k: int = 3) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


def vgg11(width: float = 0.25, num_classes: int = 10) -> nn.Sequential:
    c = [int(v * width) for v in (64, 128, 256, 512, 512)]
    stages, cin = [], 3
    for cout, reps in zip(c, (1, 1, 2, 2, 2)):
        layers: list[nn.Module] = []
        for _ in range(reps):
            layers += _conv(cin, cout)
            cin = cout
        stages.append(nn.Sequential(*layers, nn.MaxPool2d(2)))
    return nn.Sequential(*stages, nn.Sequential(nn.Flatten(), nn.Linear(cin, num_classes)))


def mobilenet_v1(width: float = 0.25, num_classes: int = 10) -> nn.Sequential:
    def ds(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return _conv(cin, cin, stride, groups=cin) + _conv(cin, cout, k=1)

    w = [int(v * width) for v in (32, 64, 128, 256, 512, 1024)]
    groups: Sequence[list[tuple[int, int, int]]] = (
        [(w[0], w[1], 1)], [(w[1], w[2], 2), (w[2], w[2], 1)], [(w[2], w[3], 2), (w[3], w[3], 1)],
        [(w[3], w[4], 2)] + [(w[4], w[4], 1)] * 5, [(w[4], w[5], 2), (w[5], w[5], 1)])
    units: list[nn.Module] = [nn.Sequential(*_conv(3, w[0]))]
    for group in groups:
        units.append(nn.Sequential(*[m for cin, cout, s in group for m in ds(cin, cout, s)]))
    units.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[5], num_classes)))
    return nn.Sequential(*units)


def alexnet(width: float = 0.25, num_classes: int = 10) -> nn.Sequential:
    c = [int(v * width) for v in (64, 192, 384, 256, 256)]
    f = int(4096 * width)
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, c[0], 3, 2, 1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Conv2d(c[0], c[1], 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Conv2d(c[1], c[2], 3, 1, 1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(c[2], c[3], 3, 1, 1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(c[3], c[4], 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), nn.Linear(c[4] * 2 * 2, f), nn.ReLU()),
        nn.Sequential(nn.Linear(f, f), nn.ReLU()),
        nn.Linear(f, num_classes))


class _Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*_conv(cin, cout, stride), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):  # type: ignore[no-untyped-def]
        return (self.body(x) + self.skip(x)).relu()


def resnet18(width: float = 0.25, num_classes: int = 10) -> nn.Sequential:
    c = [int(v * width) for v in (64, 128, 256, 512)]
    stages, cin = [], c[0]
    for i, cout in enumerate(c):
        stages.append(nn.Sequential(_Basic(cin, cout, 1 if i == 0 else 2), _Basic(cout, cout, 1)))
        cin = cout
    return nn.Sequential(nn.Sequential(*_conv(3, c[0])), *stages,
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)))


MODELS = {"MobileNet": mobilenet_v1, "VGG11": vgg11, "AlexNet": alexnet, "ResNet18": resnet18}
