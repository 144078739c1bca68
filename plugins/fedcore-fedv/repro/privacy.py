"""FedV / FedVZ privacy at micro scale: what the server can reconstruct from one client's messages.

Not a sweep, on purpose: this is an audit of one transcript, not a statistic over seeds. One round of FedV,
FedVZ, FedVZ strict (``head_grad_mode="zo"``: no gradient crosses) and SplitFed V1 runs with message
recording on (seed 0, Dirichlet(0.3), 10 clients, half per round, the micro ViT pre-trained on digits 0-4);
the honest-but-curious server then attacks one client's first batch of round 0 through each channel it saw
(smashed data; the output gradient dL/db, DLG + iDLG; the two SPSA losses), knowing the client's segments as it
distributed them at round start. The attacks are deterministic given the transcript. Accuracy across seeds is
``fedcore sweep repro/fedv_sweep.toml`` (``repro/tables.py``). From the plugin's folder (``cd plugins/fedcore-fedv``):

    nice python repro/privacy.py --out runs/fedv-privacy --readme     # ~1-2 CPU min, 1 thread

Writes ``privacy.md``, ``privacy.json`` and ``reconstructions.png`` into ``--out`` and, with ``--readme``, the
table into the plugin README (block ``fedv-privacy``) and the figure into the plugin's ``results/`` (both found
from this file, wherever it runs).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import shutil
import sys

import torch

from fedcore import Pipeline
from fedcore.builtin import DirichletPartition, UniformSync
from fedcore.data import load_digits
from fedcore.experiment import replace_block, script_command
from fedcore.models import pretrained_for_target
from fedcore_fedv import FedV, FedVZ, PairedTest
from fedcore_fedv import inversion as inv
from fedcore_split import SplitFedV1, layout_for

PLUGIN = Path(__file__).resolve().parents[1]
METHODS = ("FedV", "FedVZ", "FedVZ strict", "SplitFed V1")


def privacy(a: argparse.Namespace, train, test) -> dict:
    """Round 0 of each method with transcripts; attack one client's first batch through each channel."""
    public, _ = load_digits(classes=(0, 1, 2, 3, 4))
    public_mean = public.x.mean(0, keepdim=True)
    fedv = dict(local_epochs=1, batch_size=a.attack_batch, lr_client=a.lr, fedround=a.fedround,
                head_init=a.head_init, record_messages=True)
    variants = {"FedV": FedV(**fedv), "FedVZ": FedVZ(**fedv), "FedVZ strict": FedVZ(**fedv, head_grad_mode="zo"),
                "SplitFed V1": SplitFedV1(batch_size=a.attack_batch, lr=a.lr, record_messages=True)}
    out: dict = {"images": {}}
    smashed_first: dict[str, torch.Tensor] = {}
    for name, comp in variants.items():
        model, _ = pretrained_for_target("micro-vit", epochs=a.pretrain_epochs)
        tap = inv.TranscriptTap(rounds=(0,))
        res = Pipeline([PairedTest(), DirichletPartition(alpha=0.3), UniformSync(fraction=a.fraction), comp, tap]).run(
            model=model, train=train, test=test, num_clients=a.clients, rounds=1, seed=a.seed)
        (_, client), transcript = min(tap.transcripts.items())
        obs = inv.observe(transcript)
        bottom, server, top = inv.white_box(model, tap.models[0], layout_for(comp, model))
        idx = list(res.run.partition.train[client])
        with torch.no_grad():  # ground truth for scoring only: the client's inputs whose smashed rows were sent
            j = torch.cdist(obs.smashed.flatten(1), bottom(train.x[idx]).flatten(1)).argmin(1)
        x, y = train.x[idx][j], train.y[idx][j]
        forward = (lambda z, b=bottom, s=server: s(b(z)))  # noqa: E731
        row = {"client": client, "messages": obs.kinds, "baselines": inv.baselines(x, public_mean, seed=a.seed),
               "smashed_bytes_round0": res.ledger.total(kind="smashed", round=0)}
        x_s = inv.invert_smashed(bottom, obs.smashed, x.shape, steps=a.attack_steps)
        row["smashed"] = inv.quality(x_s, x)
        if obs.output_grad is not None:
            x_g, y_g = inv.invert_gradient(forward, top, obs.output_grad, x.shape, 5, steps=a.attack_steps)
            row["gradient"] = dict(inv.quality(x_g, x), label_accuracy=float((y_g == y).float().mean()))
            out["images"].setdefault("gradient (FedV)" if name == "FedV" else "", x_g)
        else:
            x_l, y_l = inv.invert_losses(forward, top, obs.losses, x.shape, 5, steps=a.attack_steps)
            row["losses"] = dict(inv.quality(x_l, x), label_accuracy=float((y_l == y).float().mean()),
                                 values_seen=len(obs.losses))
            if name == "FedVZ strict":
                out["images"]["losses only (FedVZ strict)"] = x_l
        if name == "FedV":
            out["images"]["true"] = x
            out["images"]["smashed (every method)"] = x_s
        smashed_first[name] = obs.smashed
        out[name] = row
        print(f"privacy {name:13s} smashed PSNR {row['smashed']['psnr']:.1f}  "
              + (f"gradient PSNR {row['gradient']['psnr']:.1f} labels {row['gradient']['label_accuracy']:.2f}"
                 if "gradient" in row else f"losses PSNR {row['losses']['psnr']:.1f}"), flush=True)
    out["images"].pop("", None)
    out["smashed_identical_fedv_fedvz"] = bool(torch.equal(smashed_first["FedV"], smashed_first["FedVZ"]))
    return out


def write(priv: dict) -> str:
    lines = ["| method | messages in the client's round | smashed-data inversion | `dL/db` inversion (DLG+iDLG) | "
             "loss-only inversion |", "|---|---|---|---|---|"]
    for m in METHODS:
        r = priv[m]
        grad = (f"{r['gradient']['psnr']:.1f} / {r['gradient']['ssim']:.2f} (labels "
                f"{r['gradient']['label_accuracy']:.0%})" if "gradient" in r else "no gradient sent")
        loss = (f"{r['losses']['psnr']:.1f} / {r['losses']['ssim']:.2f} ({r['losses']['values_seen']} values, "
                f"labels {r['losses']['label_accuracy']:.0%})" if "losses" in r else "-")
        lines.append(f"| {m} | {', '.join(f'{k} {v}' for k, v in r['messages'].items())} | "
                     f"{r['smashed']['psnr']:.1f} / {r['smashed']['ssim']:.2f} | {grad} | {loss} |")
    b = priv["FedV"]["baselines"]
    lines += ["", f"Guesses that saw nothing: uniform noise {b['random']['psnr']:.1f} / {b['random']['ssim']:.2f}, "
              f"the public (digits 0-4) mean image {b['public-mean']['psnr']:.1f} / {b['public-mean']['ssim']:.2f}. "
              f"Smashed data of FedV and FedVZ identical (first batch, same seed): "
              f"{priv['smashed_identical_fedv_fedvz']}; smashed bytes in round 0: "
              + ", ".join(f"{m} {priv[m]['smashed_bytes_round0']:,}" for m in ("FedV", "FedVZ", "FedVZ strict"))
              + "."]
    return "\n".join(lines)


def figure(priv: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    imgs = priv["images"]
    rows = [k for k in ("true", "smashed (every method)", "gradient (FedV)", "losses only (FedVZ strict)") if k in imgs]
    n = min(8, len(imgs["true"]))
    fig, axes = plt.subplots(len(rows), n, figsize=(1.2 * n + 1.5, 1.3 * len(rows)), squeeze=False)
    for r, name in enumerate(rows):
        for c in range(n):
            ax = axes[r][c]
            ax.imshow(imgs[name][c, 0].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=6, rotation=0, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/fedv-privacy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--readme", action="store_true", help="write the table and figure into the plugin README")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1e-3, help="client Adam learning rate")
    parser.add_argument("--fedround", type=int, default=5)
    parser.add_argument("--head-init", default="pretrained", choices=("pretrained", "random"))
    parser.add_argument("--pretrain-epochs", type=int, default=120)
    parser.add_argument("--attack-batch", type=int, default=16)
    parser.add_argument("--attack-steps", type=int, default=300)
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train, test = load_digits(classes=(5, 6, 7, 8, 9))
    priv = privacy(a, train, test)
    text = write(priv)
    print(text)
    (out / "privacy.md").write_text(text + "\n")
    (out / "privacy.json").write_text(json.dumps({"args": vars(a), **{k: v for k, v in priv.items() if k != "images"}},
                                                 indent=1))
    figure(priv, out / "reconstructions.png")
    if a.readme:
        command = script_command(__file__, sys.argv[1:] if argv is None else argv)  # as typed, from where it ran
        results = PLUGIN / "results" / "fedv-privacy"
        results.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "reconstructions.png", results / "reconstructions.png")
        replace_block(PLUGIN / "README.md", "fedv-privacy",
                      f"**Command:** `nice {command}`\n\n{text}\n\n![reconstructions of the attacked batch]"
                      f"(results/fedv-privacy/reconstructions.png)")
        print(f"wrote the table into {PLUGIN / 'README.md'}")


if __name__ == "__main__":
    main()
