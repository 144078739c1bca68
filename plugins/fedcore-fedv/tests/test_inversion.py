"""Gradient / smashed-data inversion on split models, and the reconstruction-quality metric."""
from __future__ import annotations

import torch
from torch import nn

from fedcore import Pipeline
from fedcore.builtin import IIDPartition
from fedcore.models import micro_vit
from fedcore.testing import tiny_data
from fedcore_fedv import inversion as inv
from fedcore_split import OUTPUT_GRAD, SMASHED, SplitFedV1, layout_for


def _images(n: int, seed: int, side: int = 4) -> torch.Tensor:
    return torch.rand(n, 1, side, side, generator=torch.Generator().manual_seed(seed))


def test_metric_is_perfect_on_copies_and_degrades_with_noise():
    x = _images(6, 0)
    exact = inv.quality(x, x)
    assert exact["mse"] == 0.0 and exact["psnr"] == 100.0 and abs(exact["ssim"] - 1.0) < 1e-6
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(x.shape, generator=gen)
    scores = [inv.quality(x + s * noise, x) for s in (0.01, 0.05, 0.2)]
    assert scores[0]["psnr"] > scores[1]["psnr"] > scores[2]["psnr"]
    assert scores[0]["ssim"] > scores[1]["ssim"] > scores[2]["ssim"]
    # PSNR of a known MSE: 10 log10(1 / 0.01) = 20 dB
    assert abs(float(inv.psnr(torch.full((1, 4), 0.6), torch.full((1, 4), 0.5))) - 20.0) < 1e-4
    base = inv.baselines(x, public_mean=torch.full((1, 1, 4, 4), 0.5))
    assert base["random"]["ssim"] < 0.3 and base["random"]["psnr"] < 12
    assert abs(base["public-mean"]["mse"] - float(((x - 0.5) ** 2).mean())) < 1e-6


def _tiny_split():
    torch.manual_seed(0)
    bottom = nn.Sequential(nn.Flatten(), nn.Linear(4, 8))
    server = nn.Sequential(nn.Tanh(), nn.Linear(8, 8))
    top = nn.Linear(8, 8)
    top.weight.data.mul_(3)
    for m in (bottom, server, top):
        m.requires_grad_(False)
    return bottom, server, top


def test_gradient_inversion_recovers_input_and_labels_from_exact_output_gradient():
    bottom, server, top = _tiny_split()
    x, y = _images(2, 1, side=2), torch.tensor([0, 5])
    b = server(bottom(x)).requires_grad_(True)
    grad_b = torch.autograd.grad(nn.functional.cross_entropy(top(b), y), b)[0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of tiny double-backward steps: threads only add contention
    try:
        x_hat, y_hat = inv.invert_gradient(lambda z: server(bottom(z)), top, grad_b, x.shape, 8, steps=300, tv=0.0)
    finally:
        torch.set_num_threads(threads)
    got, guess = inv.quality(x_hat, x), inv.baselines(x)["random"]
    assert torch.equal(y_hat, y)
    assert got["psnr"] > 25 and got["psnr"] > guess["psnr"] + 10, (got, guess)


def test_smashed_inversion_recovers_input_through_a_known_bottom():
    bottom, _, _ = _tiny_split()
    x = _images(4, 2, side=2)
    x_hat = inv.invert_smashed(bottom, bottom(x), x.shape, steps=300)
    assert inv.quality(x_hat, x)["psnr"] > 30


def test_tap_keeps_what_crossed_and_observe_reads_the_first_batch():
    torch.manual_seed(0)
    model = micro_vit(num_classes=4, depth=1, embed_dim=16, num_heads=2)
    train, test = tiny_data(n=24, n_test=8)
    tap = inv.TranscriptTap(rounds=(0,))
    comp = SplitFedV1(batch_size=8, record_messages=True)
    Pipeline([IIDPartition(), comp, tap]).run(model=model, train=train, test=test, num_clients=2, rounds=2, seed=0)
    assert set(tap.transcripts) == {(0, 0), (0, 1)} and set(tap.models) == {0}
    obs = inv.observe(tap.transcripts[(0, 0)])
    assert obs.kinds[SMASHED] == obs.kinds[OUTPUT_GRAD] == 2 and obs.losses == []
    bottom, _, _ = inv.white_box(model, tap.models[0], layout_for(comp, model))
    with torch.no_grad():
        rows = bottom(train.x).flatten(1)
    # round 0 clients start from the round-start global bottom: each smashed row is exactly some training input's
    dist = torch.cdist(obs.smashed.flatten(1), rows).min(1).values
    assert float(dist.max()) < 1e-4
    zo = inv.TranscriptTap()
    Pipeline([IIDPartition(), SplitFedV1(batch_size=8, record_messages=True, bottom_grad="zo", server_update="frozen"),
              zo]).run(model=model, train=train, test=test, num_clients=2, rounds=1, seed=0)
    assert inv.observe(zo.transcripts[(0, 0)]).output_grad is None
