"""SynthPatterns: seeded RGB images whose class is a small coloured glyph at a random position (spec 002 Sec. 6.2).

No download is possible here, so the reproduction runs on these. Each class is a fixed 5x5 binary glyph with
a colour; a sample places its class glyph anywhere (translation), adds one dimmer distractor glyph, a random
brightness and Gaussian pixel noise. Translation-equivariant local patterns favour a CNN's inductive bias at
small N, as CIFAR does in the paper's small-data regime.
"""
from __future__ import annotations

import torch

from fedcore.data import ArrayDataset
from fedcore.rng import torch_generator


def synth_patterns(*, n: int, num_classes: int = 10, size: int = 16, noise: float = 0.3, glyph: int = 5, shift: int = 3,
                   seed: int = 0, split_seed: int = 0) -> ArrayDataset:
    """``n`` images ``3 x size x size``; glyphs and colours depend on ``seed`` only, samples on ``split_seed`` too."""
    g = torch_generator(seed, "synth-patterns")
    glyphs = (torch.rand(num_classes + 4, glyph, glyph, generator=g) < 0.5).float()
    colours = 0.4 + 0.6 * torch.rand(num_classes + 4, 3, generator=g)
    s = torch_generator(seed, "synth-patterns-samples", split_seed)
    y = torch.arange(n) % num_classes
    y = y[torch.randperm(n, generator=s)]
    x = noise * torch.randn(n, 3, size, size, generator=s)
    centre, shift = (size - glyph) // 2, min(shift, (size - glyph) // 2)
    pos = centre + torch.randint(-shift, shift + 1, (n, 2, 2), generator=s)
    distractor = num_classes + torch.randint(0, 4, (n,), generator=s)
    bright = 1.2 + 0.6 * torch.rand(n, generator=s)
    for i in range(n):
        for which, scale in ((int(y[i]), float(bright[i])), (int(distractor[i]), 0.5)):
            r, c = (int(v) for v in pos[i, 0 if which == int(y[i]) else 1])
            x[i, :, r:r + glyph, c:c + glyph] += scale * colours[which, :, None, None] * glyphs[which]
    return ArrayDataset(x, y, [f"pattern{k}" for k in range(num_classes)])


def synth_patterns_dataset(*, n: int = 1000, n_test: int = 500, num_classes: int = 10, size: int = 16,
                           noise: float = 0.3, seed: int = 0) -> tuple[ArrayDataset, ArrayDataset]:
    """Named dataset ``kd.synth-patterns``: ``(train, test)`` drawn from the same glyphs."""
    return (synth_patterns(n=n, num_classes=num_classes, size=size, noise=noise, seed=seed, split_seed=0),
            synth_patterns(n=n_test, num_classes=num_classes, size=size, noise=noise, seed=seed, split_seed=1))


__all__ = ["synth_patterns", "synth_patterns_dataset"]
