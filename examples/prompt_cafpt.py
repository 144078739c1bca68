"""CaFPT vs random few-shot selection (PromptFL) over several draws, with and without label noise (thesis Tab. 6.1, Fig. 6.6).

Micro-scale analogue, NOT the thesis's setting: fedcore's tiny open_clip CLIP self-pre-trained on captioned
shapes, the shifted 30-class shapes domain; scaled down from spec 003b §5.4 (20 clients, r = 0.25, R = 20, E = 5) to 10 clients,
r = 0.3, 3 random classes per client, R = 10, E = 3, SGD lr 0.002, PVI prompts trained 5 epochs at lr 0.01, candidate pools of 4N per class, N in {1, 2, 4, 8}, a label-
noise rate rho (labels of the training split flipped to a random other class before partitioning) and
several draws (each draw re-draws pools, classes and seeds; PromptFL's random N and CaFPT's top-N come from
the same pools: a paired design, A17). Metric: global test accuracy of the final prompt (A16). Prints the
10-column layout of Tab. 6.1 per (rho, N), the fraction of clean labels among the selected samples (E11),
per-draw statistics (the draws pair the two methods: paired t test and Wilcoxon signed-rank test on the
per-draw differences), and writes a figure (accuracy range per shot, Fig. 6.6) and, with ``--readme``, the
table into the plugin README.

    nice python examples/prompt_cafpt.py --out runs/prompt_cafpt --readme
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset
from fedcore.experiment.statistics import paired
from fedcore_clip import prompted_clip
from fedcore_clip.captioned import downstream
from fedcore_clip.pretrain import load_pretrained
from fedcore.rng import numpy_generator
from fedcore_cafpt import SELECTION, CaFPT
from fedcore_promptfl import promptfl_pipeline
from readme_tables import replace_block

README = Path(__file__).resolve().parents[1] / "plugins" / "fedcore-cafpt" / "README.md"


def with_label_noise(train: ArrayDataset, rho: float, seed: int) -> ArrayDataset:
    rng = numpy_generator(seed, "label-noise")
    y = train.y.clone()
    k = len(train.classes)
    flip = rng.random(len(y)) < rho
    for i in np.flatnonzero(flip):
        y[i] = int((int(y[i]) + rng.integers(1, k)) % k)
    return ArrayDataset(train.x, y, train.classes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/prompt_cafpt")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--fraction", type=float, default=0.3)
    ap.add_argument("--classes-per-client", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--pvi-epochs", type=int, default=5)
    ap.add_argument("--shots", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--rho", type=float, nargs="+", default=[0.0, 0.3])
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--pvi-lr", type=float, default=0.01)
    ap.add_argument("--readme", action="store_true", help="write the results table into the plugin README")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backbone, info = load_pretrained("shapes")
    clean_train, test = downstream("shapes", n_train_per_class=240)
    acc: dict[tuple[str, float, int], list[float]] = {}
    clean_frac: dict[tuple[str, float, int], list[float]] = {}
    for rho in args.rho:
        for shots in args.shots:
            for draw in range(args.draws):
                train = with_label_noise(clean_train, rho, seed=1000 + draw)
                for method, select in (("PromptFL", "random"), ("CaFPT", "pvi")):
                    pipe = promptfl_pipeline(shots=shots, mode="random_classes",
                                             classes_per_client=args.classes_per_client, pool_multiplier=args.pool,
                                             fraction=args.fraction, lr=args.lr, epochs=args.epochs,
                                             select=CaFPT(shots=shots, select=select, lr=args.pvi_lr,
                                                          pvi_epochs=args.pvi_epochs, save_scores=False))
                    model = prompted_clip(backbone, train.classes, n_ctx=16, seed=draw)
                    res = pipe.run(model=model, train=train, test=test, num_clients=args.clients, rounds=args.rounds,
                                   seed=draw, eval_every=args.rounds)
                    acc.setdefault((method, rho, shots), []).append(res.history.last("test_accuracy"))
                    sel = [i for s in res.run.client_states.values() if SELECTION in s.stash for i in s.stash[SELECTION]]
                    if sel:
                        frac = float((train.y[sel] == clean_train.y[sel]).float().mean())
                        clean_frac.setdefault((method, rho, shots), []).append(frac)
                print(f"rho={rho} N={shots} draw={draw}: PromptFL {100 * acc[('PromptFL', rho, shots)][-1]:.1f} "
                      f"CaFPT {100 * acc[('CaFPT', rho, shots)][-1]:.1f}", flush=True)

    print(f"\nMicro-scale CaFPT (tiny open_clip CLIP self-pre-trained on captioned shapes); {args.clients} clients, "
          f"r={args.fraction}, {args.classes_per_client} random classes each, pools of {args.pool}N per class, "
          f"R={args.rounds}, E={args.epochs}, {args.draws} draws; global test accuracy (%); Var = population "
          f"variance over draws (pp^2)")
    head = ("PFL-min", "PFL Acc", "PFL Gap", "PFL Var", "CaFPT-min", "Δmin", "CaFPT Acc", "ΔAcc", "CaFPT Gap",
            "CaFPT Var")
    fmt = lambda p: "n/a" if p is None else f"{p:.3g}"  # noqa: E731
    lines = ["| ρ, N | " + " | ".join(head) + " | t (paired) | t p | Wilcoxon p | clean PFL / CaFPT |",
             "|---" * (len(head) + 5) + "|"]
    table = []
    for rho in args.rho:
        for shots in args.shots:
            p = 100 * np.asarray(acc[("PromptFL", rho, shots)])
            c = 100 * np.asarray(acc[("CaFPT", rho, shots)])
            cf = [np.mean(clean_frac.get((m, rho, shots), [np.nan])) for m in ("PromptFL", "CaFPT")]
            cells = [p.min(), p.mean(), p.mean() - p.min(), p.var(), c.min(), c.min() - p.min(), c.mean(),
                     c.mean() - p.mean(), c.mean() - c.min(), c.var()]
            pr = paired(dict(enumerate(p.tolist())), dict(enumerate(c.tolist())))
            assert pr is not None
            table.append({"rho": rho, "shots": shots, **dict(zip(head, cells)), "clean_pfl": cf[0],
                          "clean_cafpt": cf[1], "t": pr.t, "t_p": pr.t_p, "wilcoxon_p": pr.wilcoxon_p})
            t = "n/a" if pr.t is None else f"{pr.t:.2f}"
            lines.append(f"| {rho}, {shots} | " + " | ".join(f"{v:.2f}" for v in cells)
                         + f" | {t} | {fmt(pr.t_p)} | {fmt(pr.wilcoxon_p)} | {cf[0]:.2f} / {cf[1]:.2f} |")
    markdown = "\n".join(lines)
    print("\n" + markdown)
    (out / "results.json").write_text(json.dumps({"table": table, "acc": {f"{m}|{r}|{s}": v for (m, r, s), v in acc.items()},
                                                  "args": vars(args), "backbone": info}, indent=1, default=str))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.rho), figsize=(4.5 * len(args.rho), 3.5), sharey=True, squeeze=False)
    for ax, rho in zip(axes[0], args.rho):
        for method, colour, dx in (("PromptFL", "tab:blue", -0.06), ("CaFPT", "tab:red", 0.06)):
            xs = np.log2(args.shots) + dx
            vals = [100 * np.asarray(acc[(method, rho, s)]) for s in args.shots]
            ax.plot(xs, [v.mean() for v in vals], marker="o", color=colour, label=method)
            ax.vlines(xs, [v.min() for v in vals], [v.max() for v in vals], color=colour, alpha=0.5)
        ax.set_xticks(np.log2(args.shots), [str(s) for s in args.shots])
        ax.set_xlabel("shots per class")
        ax.set_title(f"label noise rho={rho} (micro scale)")
    axes[0][0].set_ylabel("test accuracy (%), mean and range over draws")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out / "cafpt_vs_random.png", dpi=120)
    if args.readme:
        command = "nice python examples/prompt_cafpt.py --out runs/prompt_cafpt --readme"
        replace_block(README, "cafpt-results", f"**Command:** `{command}` ({args.draws} draws per (ρ, N)).\n\n"
                      + markdown)
        print(f"wrote the table into {README}")
    print(f"\nwrote {out / 'results.json'} and {out / 'cafpt_vs_random.png'}")


if __name__ == "__main__":
    main()
