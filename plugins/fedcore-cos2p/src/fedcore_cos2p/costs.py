"""Memory and compute of Co-S2P vs FedRolex submodels at equal budget R_n (spec 004 §6 R2, R3).

Counted with the substrate on real sliced submodels of the paper's E1 ViT ("ViT-Tiny*": L = 8, D = 512,
F = 2048, 8 heads, 224x224, patch 16, 200 classes): parameters, forward + backward FLOPs per sample
(``torch.utils.flop_counter``; the frozen prefix costs forward only) and training memory with Adan
(weights + trainable gradients + 4 Adan states + the activations autograd saves, measured at batch 1 and
scaled to the device's batch). No GPU was used: memory is the model, not a measurement.
"""
from __future__ import annotations

from typing import Any

import torch

from fedcore_cos2p.budgets import ClientBudget
from fedcore_cos2p.masks import PARTS, binarize, initial_logits, kept_indices
from fedcore_cos2p.share import tie_break_scores
from fedcore_pruning import (
    PrunableViT,
    SubmodelSpec,
    ViTShape,
    count_flops,
    count_parameters,
    extract,
    fedrolex_spec,
    training_memory,
)

VIT_TINY_STAR = ViTShape(img_size=224, patch_size=16, in_chans=3, num_classes=200, embed_dim=512, depth=8,
                         num_heads=8, mlp_hidden=2048)
E1_DEVICES = {"jetson-nx8": (0.0625, 8), "jetson-agx32": (0.5625, 64), "jetson-agx64": (0.5625, 128)}


def cos2p_spec(shape: ViTShape, budget: float, start: int, seed: int = 0) -> SubmodelSpec:
    """Co-S2P's submodel: window of k_n blocks at ``start``, width masks projected onto the budget from equal
    probabilities with seeded random tie-breaks (so the pruning spreads over the held blocks as learned masks do)."""
    plan = ClientBudget.plan(shape, budget)
    blocks = start + plan.window
    probs = {p: t[:blocks] * 0 + 0.9 for p, t in initial_logits(shape, 0.0).items()}
    masks = binarize(probs, shape, plan.width, scores=tie_break_scores(shape, blocks, seed))
    kept = {p: [list(kept_indices(masks[p][b])) for b in range(blocks)] for p in PARTS}
    return SubmodelSpec.build(shape, window_start=start, window_length=plan.window,
                              heads=kept["heads"], hidden=kept["hidden"], attn_out=kept["attn_out"],
                                  mlp_out=kept["mlp_out"],
                              exits=[start + o for o in plan.offsets], head=False)


def measure(sub: PrunableViT) -> dict[str, float]:
    """Counts at batch 1; activations grow linearly with the batch, the rest does not."""
    params = count_parameters(sub)
    flops = count_flops(sub, batch=1)
    mem = training_memory(sub, batch=1, optimizer="adan")
    return {"trainable_params": params.trainable, "frozen_params": params.frozen,
            "flops_per_sample": float(flops.forward + flops.backward),
            "fixed_bytes": float(mem.weights + mem.gradients + mem.optimizer),
            "activation_bytes_1": float(mem.activations)}


def cost_table(shape: ViTShape = VIT_TINY_STAR, devices: dict[str, tuple[float, int]] = E1_DEVICES,
               seed: int = 0) -> list[dict[str, Any]]:
    """One row per (device, method): Co-S2P at the first and the last window position, FedRolex at β = R_n
    (equal trainable parameters, the residual stream unpruned) and at β = √R_n (the spec's literal width).

    FedRolex slices whole heads, so β is at least one head (1/num_heads): at R_n = 0.0625 on 8 heads FedRolex
    cannot go below 0.125, and its row says so by its β."""
    torch.manual_seed(seed)
    with torch.no_grad():
        full = PrunableViT(shape)
    state = full.state_dict()
    rows = []
    cache: dict[tuple[str, float], dict[str, float]] = {}
    for device, (budget, batch) in devices.items():
        plan = ClientBudget.plan(shape, budget)
        specs = {"Co-S2P (window at 0)": cos2p_spec(shape, budget, 0),
                 "Co-S2P (window at top)": cos2p_spec(shape, budget, shape.depth - plan.window),
                 "FedRolex (beta = R)": fedrolex_spec(shape, max(budget, 1 / shape.num_heads), 0),
                 "FedRolex (beta = sqrt R)": fedrolex_spec(shape, budget ** 0.5, 0),
                 "full model": SubmodelSpec.full(shape)}
        for method, spec in specs.items():
            key = (method, budget)
            if key not in cache:
                cache[key] = measure(extract(state, spec))
            m = cache[key]
            rows.append({"device": device, "budget": budget, "batch": batch, "method": method, **m,
                         "memory_bytes": m["fixed_bytes"] + m["activation_bytes_1"] * batch})
    return rows
