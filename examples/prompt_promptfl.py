"""PromptFL vs FedAvg fine-tuning / from scratch (thesis Tables 4.1-4.3, Fig. 4.5), at micro scale.

Micro-scale analogue, NOT the thesis's setting: the backbone is fedcore's tiny open_clip CLIP pre-trained by
fedcore on captioned synthetic shapes (``python -m fedcore_clip.pretrain``), the task is the shifted
30-class shapes domain, 10 clients, IID (all classes) and non-IID (3 disjoint classes each), N shots per
class, R rounds of E local epochs, over several seeds (each seed re-draws the partition, the prompt's and the
heads' initialisation and every shuffle). Prints Tables 4.2/4.3-style rows (Acc / macro-F1 / learnable %) as
mean ± std over seeds with the untrained prompt as a control (what the prompt scores before any federated
training) and paired comparisons across seeds; the per-round bytes from the ledger, Table 4.1 from
``system_cost`` and the real RN50 / ViT-B-16 counts; writes a figure (accuracy per round) and, with
``--readme``, the results table into the plugin README.

    nice python examples/prompt_promptfl.py --out runs/prompt_promptfl --readme
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from fedcore.experiment.statistics import paired, spread
from fedcore_clip import macro_f1, prompted_clip
from fedcore_clip.captioned import downstream
from fedcore_clip.pretrain import load_pretrained
from fedcore_promptfl import clip_image_classifier, finetune_pipeline, prompt_ratios, promptfl_pipeline, system_cost
from readme_tables import replace_block

README = Path(__file__).resolve().parents[1] / "plugins" / "fedcore-promptfl" / "README.md"
METHODS = ("Untrained prompt", "Scratch", "Finetune", "PromptFL")


def final_f1(model, test) -> float:
    with torch.no_grad():
        pred = model(test.x).argmax(-1)
    return macro_f1(pred, test.y, len(test.classes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/prompt_promptfl")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--shots", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--readme", action="store_true", help="write the results table into the plugin README")
    ap.add_argument("--prompt-lr", type=float, default=0.002)
    ap.add_argument("--ft-lr", type=float, default=0.01)
    ap.add_argument("--no-big", action="store_true", help="skip building RN50 / ViT-B-16 for the counts")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backbone, info = load_pretrained("shapes")
    train, test = downstream("shapes")
    K = len(train.classes)
    rows, curves = [], {}
    for seed in args.seeds:
        for setting, mode in (("IID", "iid"), ("non-IID", "disjoint")):
            common = dict(shots=args.shots, mode=mode, epochs=args.epochs)
            untrained = prompted_clip(backbone, train.classes, n_ctx=16, seed=seed)
            with torch.no_grad():
                pred = untrained(test.x).argmax(-1)
            rows.append({"seed": seed, "setting": setting, "method": "Untrained prompt",
                         "acc": float((pred == test.y).float().mean()), "f1": final_f1(untrained, test)})
            runs = {
                "Scratch": (finetune_pipeline(lr=args.ft_lr, **common),
                            clip_image_classifier(backbone, K, init="scratch", seed=seed)),
                "Finetune": (finetune_pipeline(lr=args.ft_lr, **common),
                             clip_image_classifier(backbone, K, init="pretrained", seed=seed)),
                "PromptFL": (promptfl_pipeline(lr=args.prompt_lr, **common),
                             prompted_clip(backbone, train.classes, n_ctx=16, seed=seed)),
            }
            for name, (pipe, model) in runs.items():
                t0 = time.perf_counter()
                res = pipe.run(model=model, train=train, test=test, num_clients=args.clients, rounds=args.rounds,
                               seed=seed)
                trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
                total = sum(p.numel() for p in model.parameters()) if name != "PromptFL" else \
                    sum(p.numel() for p in backbone.parameters()) + trainable
                row = {"seed": seed, "setting": setting, "method": name, "acc": res.history.last("test_accuracy"),
                       "f1": final_f1(model, test), "learnable_pct": 100.0 * trainable / total,
                       "bytes_up_per_round": res.ledger.total(direction="up", round=0),
                       "bytes_down_per_round": res.ledger.total(direction="down", round=0),
                       "wall_s": time.perf_counter() - t0}
                rows.append(row)
                curves.setdefault((setting, name), []).append(res.history.column("test_accuracy"))
                print(f"seed {seed} {setting:8s} {name:9s} acc {row['acc']:.3f} f1 {row['f1']:.3f} "
                      f"({row['wall_s']:.0f}s)", flush=True)
    from fedcore_clip.pretrain import zero_shot_accuracy

    zero_shot = zero_shot_accuracy(backbone, test)

    print(f"\nMicro-scale PromptFL (tiny open_clip CLIP self-pre-trained on captioned shapes; zero-shot on the shifted "
          f"test domain {zero_shot:.3f}); {args.clients} clients, {args.shots} shots, R={args.rounds}, E={args.epochs}")
    def by_seed(setting: str, method: str, key: str = "acc") -> dict[int, float]:
        return {r["seed"]: 100 * r[key] for r in rows if r["setting"] == setting and r["method"] == method}

    def cell(setting: str, method: str, key: str) -> str:
        s = spread(list(by_seed(setting, method, key).values()))
        return f"{s.mean:.1f} ± {s.std or 0.0:.1f}"

    trained = [r for r in rows if "learnable_pct" in r]
    para = {r["method"]: r["learnable_pct"] for r in trained}
    lines = [f"| setting | {' | '.join(METHODS)} |", "|---" * (len(METHODS) + 1) + "|"]
    for setting in ("IID", "non-IID"):
        lines.append(f"| {setting} | " + " | ".join(f"{cell(setting, m, 'acc')} / {cell(setting, m, 'f1')}"
                                                   for m in METHODS) + " |")
    lines.append("| Para (% learnable) | 0 (the same prompt, untrained) | "
                 f"{para['Scratch']:.0f} | {para['Finetune']:.0f} | {para['PromptFL']:.3f} |")
    lines += ["", "Paired across seeds (accuracy, points; t test and Wilcoxon p-values):", "",
              "| setting | comparison | mean difference | paired t p | Wilcoxon p |", "|---|---|---|---|---|"]
    for setting in ("IID", "non-IID"):
        for other, base in (("PromptFL", "Untrained prompt"), ("PromptFL", "Finetune"), ("Finetune", "Scratch")):
            pr = paired(by_seed(setting, base), by_seed(setting, other))
            assert pr is not None
            fmt = lambda p: "n/a" if p is None else f"{p:.3g}"  # noqa: E731
            lines.append(f"| {setting} | {other} − {base} | {pr.mean_diff:+.1f} | {fmt(pr.t_p)} | "
                         f"{fmt(pr.wilcoxon_p)} |")
    table = "\n".join(lines)
    print(f"\nTable 4.2/4.3 analogue: Acc / macro-F1 (%), mean ± std over seeds {args.seeds}\n" + table)
    print("\nBytes per round (ledger, all clients): up / down")
    for r in trained:
        if r["seed"] != args.seeds[0]:
            continue
        print(f"  {r['setting']:8s} {r['method']:9s} {r['bytes_up_per_round']:>12,d} / {r['bytes_down_per_round']:>12,d}")
    pf = next(r for r in trained if r["method"] == "PromptFL")
    ft = next(r for r in trained if r["method"] == "Finetune")
    print(f"  fine-tune / PromptFL upload ratio (tiny CLIP): {ft['bytes_up_per_round'] / pf['bytes_up_per_round']:.0f}x")

    print("\nTable 4.1 (system_cost; thesis assumptions)")
    p, f = system_cost(params=150e6, prompt_learning=True), system_cost(params=100e6)
    print(f"  communication: PromptFL {p.download_bytes / 1e6:.0f} MB once, {p.comm_seconds / 60:.2f} min | "
          f"FL {f.download_bytes / 1e9:.0f} GB down + {f.upload_bytes / 1e9:.0f} GB up, {f.comm_seconds / 3600:.2f} h")
    print(f"  training FLOPs (FL): {f.train_flops:.4g}; inference: PromptFL {p.inference_flops:.3g}, FL "
          f"{f.inference_flops:.3g}; storage: {p.storage_bytes / 1e6:.0f} MB vs {f.storage_bytes / 1e6:.0f} MB")
    ratios = {}
    if not args.no_big:
        print("\nReal open_clip counts (random weights, pretrained=None) and per-round upload ratios vs a 16x512 prompt")
        for arch in ("RN50", "ViT-B-16"):
            r = prompt_ratios(arch, head_classes=K)
            ratios[arch] = r
            print(f"  {arch:9s} image {r['image_params'] / 1e6:6.2f}M total {r['total_params'] / 1e6:6.2f}M | prompt "
                  f"{r['prompt_params']} = {r['percent_of_image']:.4f}% of the image tower, {r['percent_of_total']:.4f}% "
                  f"of CLIP | fine-tune upload / prompt upload: image tower+head {r['upload_ratio_image_tower']:,.0f}x, "
                  f"full CLIP {r['upload_ratio_full_clip']:,.0f}x (thesis: 'up to 110x')")
    (out / "results.json").write_text(json.dumps({"rows": rows, "ratios": ratios, "args": vars(args),
                                                  "backbone": info}, indent=1, default=str))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, setting in zip(axes, ("IID", "non-IID")):
        for name in ("Scratch", "Finetune", "PromptFL"):
            ys = 100 * np.asarray(curves[(setting, name)])
            mean, std = ys.mean(0), ys.std(0, ddof=1) if len(ys) > 1 else 0 * ys[0]
            xs = range(1, len(mean) + 1)
            ax.plot(xs, mean, marker="o", label=name)
            ax.fill_between(xs, mean - std, mean + std, alpha=0.2)
        untrained = 100 * np.mean(list(by_seed(setting, "Untrained prompt").values()))
        ax.axhline(untrained, color="grey", linestyle=":", label="untrained prompt")
        ax.set_title(f"{setting} (micro scale)")
        ax.set_xlabel("round")
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "promptfl_vs_finetune.png", dpi=120)
    if args.readme:
        command = "nice python examples/prompt_promptfl.py --out runs/prompt_promptfl --readme"
        replace_block(README, "promptfl-results", f"**Command:** `{command}` (seeds {args.seeds}; "
                      f"{args.clients} clients, {args.shots} shots, R = {args.rounds}, E = {args.epochs}).\n\n"
                      f"Global test accuracy / macro-F1 (%) of the final model, mean ± std over seeds:\n\n{table}")
        print(f"wrote the table into {README}")
    print(f"\nwrote {out / 'results.json'} and {out / 'promptfl_vs_finetune.png'}")


if __name__ == "__main__":
    main()
