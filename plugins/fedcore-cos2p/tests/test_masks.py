"""Spec 004 §6 tests 3 (straight-through Bernoulli masks) and 4 (Eq. 2 kept ratio), and the budget projection."""
import pytest
import torch

from fedcore.errors import ConfigError
from fedcore_cos2p import binarize, kept_ratio, random_masks, ste_sample
from fedcore_cos2p.masks import check_logits, initial_logits
from fedcore_pruning import ViTShape

SHAPE = ViTShape(img_size=8, patch_size=4, embed_dim=8, depth=1, num_heads=2, mlp_hidden=4)  # hd = 4


def test_ste_forward_is_binary_and_the_logit_gradient_is_dL_dM_times_p_1_minus_p():
    logits = torch.tensor([-1.0, 0.0, 0.5, 2.0], requires_grad=True)
    m = ste_sample(logits, torch.Generator().manual_seed(0))
    assert set(m.detach().tolist()) <= {0.0, 1.0}
    upstream = torch.tensor([0.3, -1.0, 2.0, 0.5])  # dL/dM
    (m * upstream).sum().backward()
    p = torch.sigmoid(logits.detach())
    assert torch.allclose(logits.grad, upstream * p * (1 - p))
    assert (logits.grad != 0).all()


def hand_masks():
    return {"heads": torch.tensor([[1.0, 0.0]]), "hidden": torch.tensor([[1.0, 1.0, 0.0, 0.0]]),
            "attn_out": torch.tensor([[1.0] * 6 + [0.0] * 2]), "mlp_out": torch.tensor([[1.0] * 4 + [0.0] * 4])}


def test_eq2_kept_ratio_of_a_hand_mask_with_and_without_input_propagation():
    d, f = 8, 4
    size = 3 * d * d + d * d + f * d + d * f  # qkv, proj, fc1, fc2 = 192 + 64 + 32 + 32
    # with inputs: qkv 3*4*8 = 96, proj 6 rows x 4 kept head channels = 24, fc1 2*8 = 16, fc2 4 rows x 2 units = 8
    assert float(kept_ratio(hand_masks(), SHAPE, inputs=True)) == pytest.approx((96 + 24 + 16 + 8) / size)
    # rows only: proj 6 x 8 = 48, fc2 4 x 4 = 16
    assert float(kept_ratio(hand_masks(), SHAPE, inputs=False)) == pytest.approx((96 + 48 + 16 + 16) / size)
    # residual outputs unmasked: proj 8 x 4, fc2 8 x 2
    assert float(kept_ratio(hand_masks(), SHAPE, inputs=True, residual=False)) == pytest.approx(
        (96 + 32 + 16 + 16) / size)


def test_eq2_ratio_is_differentiable_through_straight_through_masks():
    logits = {k: torch.zeros_like(v, requires_grad=True) for k, v in hand_masks().items()}
    masks = {k: ste_sample(v, torch.Generator().manual_seed(1)) for k, v in logits.items()}
    kept_ratio(masks, SHAPE).backward()
    assert all(v.grad is not None and v.grad.abs().sum() > 0 for v in logits.values())


def test_binarize_projects_onto_the_budget_dropping_the_least_probable_segments():
    shape = ViTShape(img_size=8, patch_size=4, embed_dim=16, depth=2, num_heads=4, mlp_hidden=32)
    gen = torch.Generator().manual_seed(0)
    probs = {k: 0.5 + 0.5 * torch.rand_like(v, dtype=torch.float) for k, v in initial_logits(shape, 0.0).items()}
    masks = binarize(probs, shape, 0.3)
    assert float(kept_ratio(masks, shape)) <= 0.3
    for part in masks:  # every block keeps its most probable unit of every part
        assert (masks[part].sum(1) >= 1).all()
        assert bool(masks[part][torch.arange(2), probs[part].argmax(1)].all())
    # what is dropped is less probable than what is kept, in one order over every part (each block's most probable
    # unit of a part is kept whatever its rank)
    protected = {part: torch.zeros_like(masks[part], dtype=torch.bool) for part in masks}
    for part in masks:
        protected[part][torch.arange(2), probs[part].argmax(1)] = True
    dropped = torch.cat([probs[part][masks[part] == 0] for part in masks])
    kept = torch.cat([probs[part][(masks[part] > 0) & ~protected[part]] for part in masks])
    assert len(dropped) and len(kept) and dropped.max() < kept.min()
    fixed = random_masks(shape, 0.5, ("heads",), gen)
    with_fixed = binarize(probs, shape, 0.3, fixed=fixed)
    assert torch.equal(with_fixed["heads"], fixed["heads"])


def test_masks_of_the_wrong_shape_are_one_error_naming_the_part():
    logits = initial_logits(SHAPE, 3.0)
    logits["hidden"] = torch.zeros(1, 5)
    with pytest.raises(ConfigError, match=r"mask hidden has shape \(1, 5\); the model needs \(1, 4\)"):
        check_logits(logits, SHAPE)
