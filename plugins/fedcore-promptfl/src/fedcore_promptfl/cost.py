"""Table 4.1's system-cost model, and the communication ratios from real open_clip parameter counts.

``system_cost`` is the thesis's back-of-the-envelope model made exact (spec 003a B1): communication time
from bytes and link rates, training FLOPs ``6·params·epochs·batch·seq`` (the thesis's "2·3·"),
inference FLOPs ``2·params·seq`` and storage ``params·bytes``. ``prompt_ratios`` builds the chosen
open_clip architecture on the meta device (shapes without weights; only the counts matter) and reports
how many times larger a fine-tuning upload is than a prompt upload; the thesis's "up to 110x" does not
follow from these counts (see the README).
"""
from __future__ import annotations

from functools import cache
from typing import Any

import attrs
import torch

from fedcore_clip import create_clip, parameter_counts


@attrs.frozen(kw_only=True)
class SystemCost:
    """One column of Table 4.1."""

    params: float
    download_bytes: float
    upload_bytes: float
    comm_seconds: float
    train_flops: float
    inference_flops: float
    storage_bytes: float


def system_cost(*, params: float, rounds: int = 100, batch: int = 32, epochs: int = 1, seq: int = 196,
                down_bps: float = 54e6, up_bps: float = 12e6, bytes_per_param: int = 4, prompt_learning: bool = False,
                prompt_params: float = 0.0) -> SystemCost:
    """Table 4.1 for one client.

    ``prompt_learning=True`` (PromptFL): the foundation model is downloaded once, training FLOPs are not
    modelled ("much less"), and only ``prompt_params`` travel per round (the thesis ignores them: 0).
    Otherwise (FL): every round downloads and uploads the whole model.
    """
    model_bytes = params * bytes_per_param
    if prompt_learning:
        prompt_bytes = prompt_params * bytes_per_param * rounds
        down, up = model_bytes + prompt_bytes, prompt_bytes
        train = 0.0
    else:
        down = up = model_bytes * rounds
        train = 6.0 * params * epochs * batch * seq
    return SystemCost(params=params, download_bytes=down, upload_bytes=up,
                      comm_seconds=down * 8 / down_bps + up * 8 / up_bps, train_flops=train,
                      inference_flops=2.0 * params * seq, storage_bytes=model_bytes)


@cache
def clip_counts(name: str) -> dict[str, int]:
    """Real parameter counts of an open_clip architecture, with its text token width and joint embedding width.

    Built once on the meta device: the real shapes, so the real counts, without drawing ~100 M random weights
    (RN50 in 0.05 s instead of 1.2 s); nothing is downloaded."""
    # open_clip's CLIP: its text tower and token embedding are attributes mypy cannot see (open_clip is untyped)
    with torch.device("meta"):
        model: Any = create_clip(name, pretrained=None)
    tower = model.text if hasattr(model, "text") else model
    counts = parameter_counts(model)
    counts["token_width"] = int(tower.token_embedding.weight.shape[1])
    counts["embed_dim"] = int(getattr(model.visual, "output_dim", counts["token_width"]))
    return counts


def prompt_ratios(name: str, *, n_ctx: int = 16, num_classes: int = 1, csc: bool = False, prompt_bytes: int = 4,
                  model_bytes: int = 4, head_classes: int = 0) -> dict[str, float]:
    """Prompt size vs the model's, for ``name``: params, % learnable and per-round upload ratios.

    The token width d is the text tower's; CSC multiplies the prompt by ``num_classes``. ``head_classes``
    adds a linear head to the image tower (the fine-tune baseline).
    """
    counts = clip_counts(name)
    d, embed = counts["token_width"], counts["embed_dim"]
    prompt = n_ctx * d * (num_classes if csc else 1)
    image_ft = counts["image"] + head_classes * (embed + 1)
    return {
        "prompt_params": prompt, "token_width": d, "image_params": counts["image"], "total_params": counts["total"],
        "percent_of_image": 100.0 * prompt / counts["image"], "percent_of_total": 100.0 * prompt / counts["total"],
        "upload_ratio_image_tower": image_ft * model_bytes / (prompt * prompt_bytes),
        "upload_ratio_full_clip": counts["total"] * model_bytes / (prompt * prompt_bytes),
    }
