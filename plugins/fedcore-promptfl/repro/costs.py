"""PromptFL's deterministic numbers: bytes per round, learnable share, real CLIP sizes, Table 4.1, zero-shot.

Nothing here depends on a seed, so it is not a sweep (the seeded accuracies are repro/promptfl_sweep.toml):
the bytes per round come from the ledger of one round of each pipeline at the sweep's setting (10 clients, the
tiny CLIP; a share's size does not depend on the seed), the learnable share and the RN50 / ViT-B-16 sizes are
parameter counts (``prompt_ratios`` builds the open_clip architectures on the meta device, nothing is
downloaded), Table 4.1 is ``system_cost``'s closed form and the zero-shot accuracy is the fixed backbone's.

    cd plugins/fedcore-promptfl
    python repro/costs.py --write README.md
"""
from __future__ import annotations

import argparse
from pathlib import Path
import sys

import torch

from fedcore.experiment import replace_block, script_command
from fedcore_clip import prompted_clip
from fedcore_clip.captioned import downstream
from fedcore_clip.pretrain import load_pretrained
from fedcore_promptfl import clip_image_classifier, finetune_pipeline, prompt_ratios, promptfl_pipeline, system_cost

CLIENTS = 10


def bytes_per_round(pipe, model, train, test) -> tuple[int, int]:
    res = pipe.run(model=model, train=train, test=test, num_clients=CLIENTS, rounds=1, seed=0)
    return res.ledger.total(direction="up", round=0), res.ledger.total(direction="down", round=0)


def learnable(model, frozen: int = 0) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, frozen + sum(p.numel() for p in model.parameters() if not p.requires_grad) + trainable


def block() -> str:
    torch.set_num_threads(1)
    backbone, info = load_pretrained("shapes")
    train, test = downstream("shapes")
    K = len(train.classes)
    prompt = prompted_clip(backbone, train.classes, n_ctx=16)
    tower = clip_image_classifier(backbone, K, init="pretrained")
    pf_up, pf_down = bytes_per_round(promptfl_pipeline(shots=2, mode="iid", epochs=1), prompt, train, test)
    ft_up, ft_down = bytes_per_round(finetune_pipeline(shots=2, mode="iid", epochs=1), tower, train, test)
    pf_train, pf_total = learnable(prompt)
    ft_train, ft_total = learnable(tower)
    command = script_command(__file__, sys.argv[1:])  # as typed, from the folder it ran in
    lines = [f"**Command:** `{command}` (no seeds: every number below is a count or a fixed model's score).", "",
             f"Backbone `{backbone.name}`: {sum(p.numel() for p in backbone.parameters()) / 1e6:.1f} M parameters; "
             f"zero-shot accuracy of the hand-written caption ensemble (no prompt learning) "
             f"{100 * info['zero_shot_pretrain']:.1f} % on its pre-training images and "
             f"**{100 * info['zero_shot_downstream_test']:.1f} %** on the shifted test domain.", "",
             f"Bytes per round (ledger, {CLIENTS} clients, tiny CLIP) and the learnable share of each model:", "",
             "| method | bytes up / round | bytes down / round | learnable parameters | of the model |",
             "|---|---:|---:|---:|---:|",
             f"| PromptFL | {pf_up:,} | {pf_down:,} | {pf_train:,} | {100 * pf_train / pf_total:.3f} % |",
             f"| Finetune / Scratch (image tower + head) | {ft_up:,} | {ft_down:,} | {ft_train:,} | "
             f"{100 * ft_train / ft_total:.0f} % |", "",
             f"Fine-tune / PromptFL upload per round: **{ft_up / pf_up:,.0f}x** (tiny CLIP).", "",
             "Real open_clip sizes (random weights) and the upload of fine-tuning vs a 16-token prompt "
             f"({K}-class head, fp32):", "",
             "| architecture | image tower | whole CLIP | prompt | prompt / image tower | prompt / CLIP | "
             "image tower + head upload / prompt upload | full CLIP upload / prompt upload |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arch in ("RN50", "ViT-B-16"):
        r = prompt_ratios(arch, head_classes=K)
        lines.append(f"| {arch} | {r['image_params'] / 1e6:.2f} M | {r['total_params'] / 1e6:.2f} M | "
                     f"{r['prompt_params']:,} | {r['percent_of_image']:.4f} % | {r['percent_of_total']:.4f} % | "
                     f"{r['upload_ratio_image_tower']:,.0f}x | {r['upload_ratio_full_clip']:,.0f}x |")
    p, f = system_cost(params=150e6, prompt_learning=True), system_cost(params=100e6)
    lines += ["", "Table 4.1 (`system_cost()`, the thesis's assumptions):", "",
              "| | PromptFL | FL |", "|---|---|---|",
              f"| communication | {p.download_bytes / 1e6:.0f} MB once, {p.comm_seconds / 60:.2f} min | "
              f"{f.download_bytes / 1e9:.0f} GB down + {f.upload_bytes / 1e9:.0f} GB up, "
              f"{f.comm_seconds / 3600:.2f} h |",
              f"| training FLOPs | not modelled (thesis: 'much less') | {f.train_flops:.4g} |",
              f"| inference FLOPs | {p.inference_flops:.3g} | {f.inference_flops:.3g} |",
              f"| storage | {p.storage_bytes / 1e6:.0f} MB | {f.storage_bytes / 1e6:.0f} MB |"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", type=Path, help="README to write the block into (between the promptfl-costs markers)")
    args = ap.parse_args()
    text = block()
    if args.write:
        replace_block(args.write, "promptfl-costs", text)
        print(f"wrote the promptfl-costs block into {args.write}")
    else:
        print(text)


if __name__ == "__main__":
    main()
