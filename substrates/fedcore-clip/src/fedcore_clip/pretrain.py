"""The "pre-trained" tiny CLIP made by fedcore: contrastive pre-training of ``fedcore-tiny-clip`` on captions.

No CLIP weights can be downloaded here, so "pre-trained" means: open_clip's own CLIP class in the tiny
``fedcore-tiny-clip`` configuration, trained by fedcore with the symmetric InfoNCE loss on a captioned set
(``shapes``: "a photo of a red circle."; or ``digits``: "a photo of the digit three."), deterministic by
seed and cached as safetensors keyed on every setting. Reports must say so. Same-class pairs in a batch
are soft positives; the logit scale is clamped at 100.

    python -m fedcore_clip.pretrain                    # build (or find) the cached shapes CLIP
    python -m fedcore_clip.pretrain --dataset digits
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
import time
from typing import Any

import torch
from torch.nn import functional as F

from fedcore.models import cache_root, deterministic_build, write_cached
from fedcore_clip.backbone import TINY, FrozenCLIP, create_clip, get_tokenizer


def _settings(dataset: str, steps: int, batch_size: int, lr: float, seed: int, n_per_class: int) -> dict[str, Any]:
    out = {"arch": TINY, "dataset": dataset, "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
           "format": 2}  # 2: built under deterministic_build (one thread); format 1 depended on the thread count
    if n_per_class != 200:
        out["n_per_class"] = n_per_class
    return out


def cache_path(dataset: str = "shapes", *, steps: int = 1500, batch_size: int = 128, lr: float = 1e-3,
               seed: int = 0, n_per_class: int = 200) -> Path:
    key = hashlib.sha256(json.dumps(_settings(dataset, steps, batch_size, lr, seed, n_per_class),
                                    sort_keys=True).encode())
    return cache_root() / f"{TINY}-{dataset}-{key.hexdigest()[:16]}.safetensors"


def pretrain_tiny_clip(dataset: str = "shapes", *, steps: int = 1500, batch_size: int = 128, lr: float = 1e-3,
                       seed: int = 0, n_per_class: int = 200, cache: bool = True, verbose: bool = False
                       ) -> tuple[FrozenCLIP, dict[str, Any]]:
    """Pre-train (or load from the cache) the tiny CLIP; returns it frozen, with an info dict."""
    from safetensors.torch import load_file

    from fedcore_clip.captioned import captions, downstream, pretraining_set

    path = cache_path(dataset, steps=steps, batch_size=batch_size, lr=lr, seed=seed, n_per_class=n_per_class)
    # open_clip's CLIP: its encoders and logit_scale are attributes mypy cannot see (open_clip is untyped)
    model: Any = create_clip(TINY, seed=seed)
    if cache and path.exists():
        model.load_state_dict(load_file(str(path)))
        info: dict[str, Any] = json.loads(path.with_suffix(".json").read_text())  # the build's zero-shot figures
        return FrozenCLIP(model, name=TINY), info
    data = pretraining_set(dataset, seed=seed, n_per_class=n_per_class)
    caps, templates = captions(dataset, data.classes)
    tok = get_tokenizer(TINY)
    ids = tok([c for per_class in caps for c in per_class])  # [K * T, L]
    n_t = len(templates)
    prep = FrozenCLIP(create_clip(TINY, seed=seed), name=TINY).prep  # same preprocessing as downstream
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm
        else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    g = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]), deterministic_build():
        torch.manual_seed(seed)
        for step in range(steps):
            pos = torch.randint(0, len(data), (batch_size,), generator=g)
            y = data.y[pos]
            t = torch.randint(0, n_t, (batch_size,), generator=g)
            img = F.normalize(model.encode_image(prep(data.x[pos])), dim=-1)
            txt = F.normalize(model.encode_text(ids[y * n_t + t]), dim=-1)
            logits = model.logit_scale.exp() * img @ txt.t()
            target = (y[:, None] == y[None, :]).float()
            target = target / target.sum(1, keepdim=True)
            loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(100))
            if verbose and (step + 1) % 100 == 0:
                print(f"pretrain {TINY} on {dataset}: step {step + 1}/{steps} loss {float(loss.detach()):.3f} "
                      f"scale {float(model.logit_scale.detach().exp()):.1f} ({time.perf_counter() - start:.0f}s)",
                      flush=True)
    frozen = FrozenCLIP(model.eval(), name=TINY)
    info = dict(_settings(dataset, steps, batch_size, lr, seed, n_per_class), path=str(path),
                train_seconds=round(time.perf_counter() - start, 1),
                logit_scale=float(frozen.logit_scale()),
                note="tiny open_clip CLIP pre-trained by fedcore on captioned "
                     f"{dataset}; no external weights")
    with deterministic_build():
        for split, ds in (("pretrain", data), ("downstream_test", downstream(dataset, seed=seed)[1])):
            info[f"zero_shot_{split}"] = zero_shot_accuracy(frozen, ds, dataset)
    if cache:
        write_cached(path, model.state_dict(), info)
    return frozen, info


@torch.no_grad()
def zero_shot_accuracy(backbone: FrozenCLIP, dataset: Any, kind: str = "shapes") -> float:
    """Accuracy of the hand-written prompt ensemble (the caption templates) on ``dataset``."""
    from fedcore_clip.captioned import captions
    from fedcore_clip.features import encode_all

    caps, templates = captions(kind, dataset.classes)
    tok = get_tokenizer(backbone.name)
    text = F.normalize(backbone.model.encode_text(tok([c for cs in caps for c in cs])), dim=-1)
    text = F.normalize(text.view(len(caps), len(templates), -1).mean(1), dim=-1)
    feats = encode_all(backbone, dataset, range(len(dataset)))
    return float(((feats @ text.t()).argmax(-1) == dataset.y).float().mean())


def load_pretrained(dataset: str = "shapes", *, seed: int = 0, build: bool = True, **kwargs: Any
                    ) -> tuple[FrozenCLIP, dict[str, Any]]:
    """The cached pre-trained tiny CLIP; builds it (a few CPU minutes) when missing and ``build`` is true."""
    path = cache_path(dataset, seed=seed, **kwargs)
    if not path.exists() and not build:
        raise FileNotFoundError(f"no pre-trained tiny CLIP at {path}; run `python -m fedcore_clip.pretrain "
                                f"--dataset {dataset} --seed {seed}` first")
    if not path.exists():
        print(f"[fedcore] pre-training the tiny CLIP on {dataset} (once; cached at {path})", flush=True)
    return pretrain_tiny_clip(dataset, seed=seed, verbose=not path.exists(), **kwargs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="shapes", choices=("shapes", "digits"))
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)  # no --threads: the build always runs on one thread (deterministic_build)
    _, info = pretrain_tiny_clip(args.dataset, steps=args.steps, seed=args.seed, verbose=True)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
