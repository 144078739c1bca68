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
    # Every sample's class glyph, then every sample's distractor, pasted at once: the same additions in the same
    # order per pixel as a loop over the samples (no two samples share a pixel), ~6x faster.
    sample, channel = torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None]
    offsets = torch.arange(glyph)
    for which, scale, slot in ((y, bright, 0), (distractor, torch.full((n,), 0.5), 1)):
        rows = (pos[:, slot, 0, None] + offsets)[:, None, :, None]
        cols = (pos[:, slot, 1, None] + offsets)[:, None, None, :]
        patch = scale[:, None, None, None] * colours[which][:, :, None, None] * glyphs[which][:, None]
        x[sample, channel, rows, cols] += patch
    return ArrayDataset(x, y, [f"pattern{k}" for k in range(num_classes)])


def synth_patterns_dataset(*, n: int = 1000, n_test: int = 500, num_classes: int = 10, size: int = 16,
                           noise: float = 0.3, seed: int = 0) -> tuple[ArrayDataset, ArrayDataset]:
    """Named dataset ``kd.synth-patterns``: ``(train, test)`` drawn from the same glyphs."""
    return (synth_patterns(n=n, num_classes=num_classes, size=size, noise=noise, seed=seed, split_seed=0),
            synth_patterns(n=n_test, num_classes=num_classes, size=size, noise=noise, seed=seed, split_seed=1))


__all__ = ["synth_patterns", "synth_patterns_dataset"]
