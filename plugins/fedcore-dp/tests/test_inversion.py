"""The inversion check reconstructs a plain update's image and fails on a DP release."""
import torch

from fedcore.data import load_digits
from fedcore.models import tiny_mlp
from fedcore_dp.inversion import inversion_check, release, sgd_update


def test_plain_updates_leak_the_image_and_dp_releases_do_not():
    train, test = load_digits(seed=0)
    torch.manual_seed(0)
    model = tiny_mlp(num_classes=10, in_features=64, hidden=64)
    rows = inversion_check(model, test.x[:1].float(), test.y[:1], public_mean=train.x.float().mean(0, keepdim=True),
                           clip_norm=0.1, noise_multipliers=(0.0, 1.0), steps=150)
    plain, clipped, noised, guess = rows
    assert plain["label_correct"] and plain["mse"] < 0.5 * guess["mse"]     # better than knowing nothing
    assert abs(clipped["mse"] - plain["mse"]) < 1e-3                        # clipping alone only rescales
    assert noised["mse"] > guess["mse"]                                     # the noise leaves nothing to match


def test_release_is_clip_then_noise():
    torch.manual_seed(0)
    model = tiny_mlp(num_classes=3, in_features=4, hidden=5)
    update = sgd_update(model, torch.randn(1, 4), torch.tensor([1]), lr=1.0)
    out = release(update, 1e-3, 0.0, torch.Generator().manual_seed(0))
    norm = sum(float(v.double().pow(2).sum()) for v in out.values()) ** 0.5
    assert abs(norm - 1e-3) < 1e-9
