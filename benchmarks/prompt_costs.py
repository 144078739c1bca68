"""Prompt learning costs, measured side by side in one run (no timed assertions anywhere).

1. Bytes per round from the ledger: PromptFL (prompt only) vs full fine-tune FedAvg of the same CLIP (every
   parameter of both towers trained, downloaded and uploaded) vs the image tower + head baseline.
2. Local-update time with cached frozen image features vs re-encoding the images every step.
3. Trainable-parameter ratios for the tiny CLIP and for the real RN50 / ViT-B-16 architectures
   (built on the meta device: only the counts matter).

    nice python benchmarks/prompt_costs.py            # add --big to time a random-weight RN50 at 224 px too
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.nn import functional as F

from fedcore import Pipeline
from fedcore.builtin import FedAvg, FewShotPartition, SGDUpdate, UniformSync, WholeModel
from fedcore_clip import PromptedCLIP, load_backbone, prompted_clip
from fedcore_clip.backbone import get_tokenizer
from fedcore_clip.captioned import downstream
from fedcore_promptfl import clip_image_classifier, finetune_pipeline, prompt_ratios, promptfl_pipeline


class FullCLIPClassifier(nn.Module):
    """Both CLIP towers trainable; logits = exp(t)·cos(image, text("a photo of a {class}."))."""

    def __init__(self, backbone, classnames):
        super().__init__()
        import copy

        self.clip = copy.deepcopy(backbone.model)
        for p in self.clip.parameters():
            p.requires_grad_(True)
        self.prep = backbone.prep
        self.register_buffer("ids", get_tokenizer(backbone.name)([f"a photo of a {c}." for c in classnames]),
                             persistent=False)

    def forward(self, x):
        img = F.normalize(self.clip.encode_image(self.prep(x)), dim=-1)
        txt = F.normalize(self.clip.encode_text(self.ids), dim=-1)
        return self.clip.logit_scale.exp() * img @ txt.t()


def time_update(model: PromptedCLIP, train, *, cache: bool, shots: int, epochs: int, repeats: int = 3) -> float:
    pipe = promptfl_pipeline(shots=shots, mode="iid", epochs=epochs, lr=0.01)
    from fedcore_clip import PromptUpdate

    pipe = pipe.replace(local_update=PromptUpdate(lr=0.01, epochs=epochs, cache_features=cache))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        pipe.run(model=model.working_copy(), train=train, test=None, num_clients=1, rounds=1, seed=0)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", action="store_true", help="also time a random-weight RN50 (224 px) local update")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bb = load_backbone("fedcore-tiny-clip")
    train, test = downstream("shapes", n_train_per_class=20, n_test_per_class=2)
    K = len(train.classes)
    n = 10
    common = dict(train=train, test=None, num_clients=n, rounds=1, seed=0)
    pf = promptfl_pipeline(shots=2, mode="iid", epochs=1, lr=0.01).run(
        model=prompted_clip(bb, train.classes, n_ctx=16), **common)
    full = Pipeline([FewShotPartition(shots=2, mode="iid"), UniformSync(), WholeModel(), SGDUpdate(lr=0.01),
                     FedAvg()]).run(model=FullCLIPClassifier(bb, train.classes), **common)
    tower = finetune_pipeline(shots=2, mode="iid", epochs=1).run(model=clip_image_classifier(bb, K), **common)
    print(f"1. Bytes per round, {n} clients, tiny CLIP (ledger, up + down)")
    base = pf.ledger.total(round=0)
    for name, res in (("PromptFL (16x64 prompt)", pf), ("full CLIP fine-tune FedAvg", full),
                      ("image tower + head FedAvg", tower)):
        b = res.ledger.total(round=0)
        print(f"   {name:28s} {b:>14,d} B   {b / base:10,.0f}x PromptFL")

    print("\n2. One client's local update (5 epochs), best of 3: cached features vs re-encoding every step")
    for shots in (4, 16):
        model = prompted_clip(bb, train.classes, n_ctx=16)
        t_cache = time_update(model, train, cache=True, shots=shots, epochs=5)
        t_raw = time_update(model, train, cache=False, shots=shots, epochs=5)
        print(f"   tiny CLIP, {shots:2d} shots x {K} classes: cached {t_cache:.3f}s, uncached {t_raw:.3f}s, "
              f"speed-up {t_raw / t_cache:.2f}x")
    if args.big:
        big = load_backbone("RN50")
        classes = train.classes[:10]
        small = train.subset([i for i in range(len(train)) if int(train.y[i]) < 10])
        small.classes = classes
        model = prompted_clip(big, classes, n_ctx=16)
        t_cache = time_update(model, small, cache=True, shots=2, epochs=2, repeats=1)
        t_raw = time_update(model, small, cache=False, shots=2, epochs=2, repeats=1)
        print(f"   RN50 (random weights, 224 px), 2 shots x 10 classes, 2 epochs: cached {t_cache:.1f}s, "
              f"uncached {t_raw:.1f}s, speed-up {t_raw / t_cache:.2f}x")

    print("\n3. Trainable parameters: prompt (16 context vectors) vs the model")
    tiny = prompted_clip(bb, train.classes, n_ctx=16)
    n_prompt = tiny.prompt.ctx.numel()
    n_all = sum(p.numel() for p in tiny.parameters())
    n_img = sum(p.numel() for p in bb.model.visual.parameters())
    print(f"   fedcore-tiny-clip: prompt {n_prompt:,d} / CLIP {n_all:,d} = {100 * n_prompt / n_all:.3f}% "
          f"(image tower {n_img:,d}: {100 * n_prompt / n_img:.2f}%)")
    for arch in ("RN50", "ViT-B-16"):
        r = prompt_ratios(arch)
        print(f"   {arch:17s}: prompt {r['prompt_params']:,d} / CLIP {r['total_params']:,d} = "
              f"{r['percent_of_total']:.4f}% (image tower {r['image_params']:,d}: {r['percent_of_image']:.4f}%); "
              f"upload ratio {r['upload_ratio_image_tower']:,.0f}x (tower) / "
              f"{r['upload_ratio_full_clip']:,.0f}x (CLIP)")


if __name__ == "__main__":
    main()
