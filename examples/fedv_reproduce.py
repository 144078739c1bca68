"""FedV / FedVZ vs SplitFed V1/V2 and FedAvg at micro scale, beside the paper's Table 2 trend; bytes; inversion.

"Pre-trained" = the micro ViT (timm, width 64, depth 4, 8x8 input, patch 2) pre-trained by fedcore on
digits 0-4 (cached, ``--pretrain-epochs``); the federated target task is digits 5-9 with a fresh head,
10 clients, half of them per round, Dirichlet(0.3) and pathological (2 classes per client) label skew,
paired per-client test splits (FedV App. 0.A.1). Every method starts from the same pre-trained model
except "FedAvg (scratch)", the paper's kind of FL baseline (same micro ViT, random init);
FedV/FedVZ cut after the patch embedding and keep LayerNorm + classifier on the client.

    nice python examples/fedv_reproduce.py --out runs/fedv --readme     # seeds 0-2; ~13 min wall per seed, 1 thread

Each seed re-draws the partition, the heads and every shuffle (the pre-trained encoder is the same cached
one). Accuracy is mean ± std over seeds; FedV and FedVZ are compared, per seed, with the frozen-encoder
control (the same pipeline with ``lr_server=0``: what the pre-trained encoder gives without any federated
encoder training) and with each other (paired t test and Wilcoxon). The FedAvg rows are scored two ways:
the global model on each client's test split, and each client's local model (the global model after the
client's own local update), which is how the paper scores its FedAvg baseline.

Writes ``results.json``, ``results.md`` and ``fedv_reproduce.png`` (accuracy per round, reconstructions) and,
with ``--readme``, the tables into the plugin README.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from fedcore import Pipeline
from fedcore.builtin import DirichletPartition, FedAvg, SGDUpdate, ShardPartition, UniformSync, WholeModel
from fedcore.data import load_digits
from fedcore.experiment.statistics import paired, spread
from fedcore.models import micro_vit
from fedcore.models.pretrain import pretrained_for_target
from fedcore_split import SplitEval, SplitFedV1, SplitFedV2, layout_for
from fedcore_fedv import inversion as inv
from fedcore_fedv import FedV, FedVZ, LocalModelEval, PairedTest
from readme_tables import replace_block

README = Path(__file__).resolve().parents[1] / "plugins" / "fedcore-fedv" / "README.md"
PAIRS = (("FedV", "Frozen encoder"), ("FedVZ", "Frozen encoder"), ("FedV", "FedVZ"))

# FedV Table 2 (CIFAR-10, DeiT-S for FedV/FedVZ, ResNet-50-GN for FedAvg), mean of 3 seeds, as printed
PAPER_TABLE2 = {
    "FedAvg (scratch)": {"Dir-0.3": 82.02, "Path-2": 86.99},
    "FedV": {"Dir-0.3": 96.87, "Path-2": 94.77},
    "FedVZ": {"Dir-0.3": 95.88, "Path-2": 96.63},
}
PAPER_CITE = ("Shi, Zhang, Huang, Yang, Shen, Chen, Wang, 'Heterogeneous Federated Learning with Splited Language "
              "Model', Table 2 (CIFAR-10 Dir 0.3 / Path c=2)")


def methods(a: argparse.Namespace) -> dict[str, list]:
    fedv = dict(local_epochs=a.epochs, batch_size=a.batch, lr_client=a.lr, fedround=a.fedround,
                head_init=a.head_init, lr_server=a.lr_server)
    split = dict(epochs=a.epochs, batch_size=a.batch, lr=a.lr, server_lr=a.lr_server_splitfed)
    return {
        "FedAvg (scratch)": [WholeModel(), SGDUpdate(optimizer="adam", lr=a.lr, epochs=a.epochs, batch_size=a.batch),
                             FedAvg()],
        "FedAvg (pre-trained)": [WholeModel(), SGDUpdate(optimizer="adam", lr=a.lr, epochs=a.epochs,
                                                         batch_size=a.batch), FedAvg()],
        "SplitFed V1": [SplitFedV1(**split)],
        "SplitFed V2": [SplitFedV2(**split)],
        "Frozen encoder": [FedV(**dict(fedv, lr_server=0.0))],
        "FedV": [FedV(**fedv)],
        "FedVZ": [FedVZ(**fedv)],
        "FedVZ strict": [FedVZ(**fedv, head_grad_mode="zo")],
    }


def partitions() -> dict[str, object]:
    return {"Dir-0.3": DirichletPartition(alpha=0.3), "Path-2": ShardPartition(classes_per_client=2)}


def run_table(a: argparse.Namespace, train, test, seed: int) -> dict:
    out: dict = {}
    for pname, part in partitions().items():
        for mname, comps in methods(a).items():
            model, _ = pretrained_for_target("micro-vit", epochs=a.pretrain_epochs)
            if "scratch" in mname:  # the paper's FL baselines start from scratch
                torch.manual_seed(seed)
                model = micro_vit(num_classes=5)
            evaluate = LocalModelEval(epochs=a.epochs, lr=a.lr, optimizer="adam", batch_size=a.batch) \
                if mname.startswith("FedAvg") else SplitEval()
            t0 = time.perf_counter()
            res = Pipeline([PairedTest(), part, UniformSync(fraction=a.fraction), *comps, evaluate]).run(
                model=model, train=train, test=test, num_clients=a.clients, rounds=a.rounds, seed=seed)
            accs = [float(v) for v in res.history.column("test_accuracy")]
            led = res.ledger
            out[(pname, mname)] = {
                "accuracy": accs[-1], "local_model_accuracy": res.history[-1].get("local_model_accuracy"),
                "best": max(accs), "curve": accs, "seconds": time.perf_counter() - t0,
                "bytes_per_round": led.total() / a.rounds, "up_per_round": led.total(direction="up") / a.rounds,
                "down_per_round": led.total(direction="down") / a.rounds,
                "by_kind": {f"{d}:{k}": v / a.rounds for (d, k), v in sorted(led.by_kind().items())},
            }
            print(f"seed {seed} {pname:8s} {mname:15s} acc {accs[-1]:.3f} (best {max(accs):.3f})  "
                  f"{led.total() / a.rounds / 2**20:7.2f} MiB/round  {out[(pname, mname)]['seconds']:.0f}s", flush=True)
    return out


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
            model=model, train=train, test=test, num_clients=a.clients, rounds=1, seed=a.seeds[0])
        (_, client), transcript = min(tap.transcripts.items())
        obs = inv.observe(transcript)
        bottom, server, top = inv.white_box(model, tap.models[0], layout_for(comp, model))
        idx = list(res.run.partition.train[client])
        with torch.no_grad():  # ground truth for scoring only: the client's inputs whose smashed rows were sent
            j = torch.cdist(obs.smashed.flatten(1), bottom(train.x[idx]).flatten(1)).argmin(1)
        x, y = train.x[idx][j], train.y[idx][j]
        forward = (lambda z, b=bottom, s=server: s(b(z)))
        row = {"client": client, "messages": obs.kinds, "baselines": inv.baselines(x, public_mean, seed=a.seeds[0]),
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


def write(a: argparse.Namespace, tables: dict[int, dict], priv: dict, info: dict, seconds: float) -> str:
    names = list(methods(a))
    parts = list(partitions())
    first = tables[a.seeds[0]]

    def per_seed(p: str, m: str, key: str = "accuracy") -> dict[int, float]:
        return {s: 100 * t[(p, m)][key] for s, t in tables.items() if t[(p, m)].get(key) is not None}

    def cell(p: str, m: str, key: str = "accuracy") -> str:
        sp = spread(list(per_seed(p, m, key).values()))
        return f"{sp.mean:.1f} ± {sp.std or 0.0:.1f}"

    lines = [f"Micro-scale reproduction ({a.clients} clients, {a.fraction:.0%} per round, {a.rounds} rounds, "
             f"{a.epochs} local epochs, batch {a.batch}, seeds {a.seeds}; pre-trained micro ViT: digits 0-4, "
             f"{a.pretrain_epochs} epochs, source accuracy {info['source_accuracy']:.3f}); total {seconds:.0f} s", "",
             "| method | " + " | ".join(f"{p} acc (ours)" for p in parts) + " | " + " | ".join(f"{p} paper" for p in parts)
             + " | bytes/round (Dir-0.3) | up / down |",
             "|---|" + "---|" * (2 * len(parts) + 2)]
    for m in names:
        accs = " | ".join(cell(p, m) for p in parts)
        paper = " | ".join(f"{PAPER_TABLE2[m][p]:.2f}" if m in PAPER_TABLE2 else "-" for p in parts)
        r = first[(parts[0], m)]
        lines.append(f"| {m} | {accs} | {paper} | {r['bytes_per_round'] / 2**20:.2f} MiB | "
                     f"{r['up_per_round'] / 2**20:.2f} / {r['down_per_round'] / 2**20:.2f} MiB |")
        if m.startswith("FedAvg"):
            accs = " | ".join(cell(p, m, "local_model_accuracy") for p in parts)
            lines.append(f"| {m}, each client's local model (the paper's scoring) | {accs} | "
                         + " | ".join("-" for _ in parts) + " | | |")
    fmt = lambda v: "n/a" if v is None else f"{v:.3g}"  # noqa: E731
    lines += ["", "Paired across seeds (accuracy difference in points; paired t test and Wilcoxon p-values):", "",
              "| comparison | partition | mean difference | paired t p | Wilcoxon p |", "|---|---|---|---|---|"]
    for x, y in PAIRS:
        for p in parts:
            pr = paired(per_seed(p, y), per_seed(p, x))
            assert pr is not None
            lines.append(f"| {x} − {y} | {p} | {pr.mean_diff:+.1f} | {fmt(pr.t_p)} | {fmt(pr.wilcoxon_p)} |")
    for p in parts:
        mean = {m: sum(per_seed(p, m).values()) / len(tables) for m in names}
        ours = sorted(PAPER_TABLE2, key=lambda m: -mean[m])
        paper = sorted(PAPER_TABLE2, key=lambda m: -PAPER_TABLE2[m][p])
        lines.append(f"\n{p} ordering of the means: ours {' > '.join(ours)}; paper {' > '.join(paper)}; all methods "
                     "(ours): " + " > ".join(sorted(names, key=lambda m: -mean[m])))
    lines += ["", f"Accuracy: personalised test accuracy (%) after the last round, sample-weighted over the clients' "
              "paired test splits (FedV/FedVZ: global encoder + each client's own head and tail; the others: the "
              "global model, and for FedAvg also each client's local model).", f"Paper numbers: {PAPER_CITE}; paper FedAvg is ResNet-50-GN from scratch, compared with "
              "our FedAvg (scratch) row.", "",
              "Inversion of one client's first batch of round 0 (Dir-0.3), attacker = the server, knowing the "
              "round-start client segments; PSNR dB / SSIM (higher = more leaked):", "",
              "| method | messages kinds (client 1st round) | smashed-data attack | gradient attack (labels) | "
              "loss-only attack | no-message guess: random / public mean |", "|---|---|---|---|---|---|"]
    for m in ("FedV", "FedVZ", "FedVZ strict", "SplitFed V1"):
        r = priv[m]
        grad = (f"{r['gradient']['psnr']:.1f} / {r['gradient']['ssim']:.2f} ({r['gradient']['label_accuracy']:.0%})"
                if "gradient" in r else "no gradient sent")
        loss = (f"{r['losses']['psnr']:.1f} / {r['losses']['ssim']:.2f} ({r['losses']['values_seen']} values, "
                f"labels {r['losses']['label_accuracy']:.0%})"
                if "losses" in r else "-")
        b = r["baselines"]
        lines.append(f"| {m} | {', '.join(f'{k} {v}' for k, v in r['messages'].items())} | "
                     f"{r['smashed']['psnr']:.1f} / {r['smashed']['ssim']:.2f} | {grad} | {loss} | "
                     f"{b['random']['psnr']:.1f} / {b['random']['ssim']:.2f}, "
                     f"{b['public-mean']['psnr']:.1f} / {b['public-mean']['ssim']:.2f} |")
    lines.append("")
    lines.append(f"Smashed data of FedV and FedVZ identical (first batch, same seed): "
                 f"{priv['smashed_identical_fedv_fedvz']}; smashed bytes in round 0: "
                 + ", ".join(f"{m} {priv[m]['smashed_bytes_round0']}" for m in ("FedV", "FedVZ", "FedVZ strict")))
    return "\n".join(lines)


def figure(a: argparse.Namespace, tables: dict[int, dict], priv: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = list(partitions())
    imgs = priv["images"]
    n = min(8, len(imgs["true"]))
    fig = plt.figure(figsize=(12, 7))
    for i, p in enumerate(parts):
        ax = fig.add_subplot(2, 2, i + 1)
        for m in methods(a):
            curves = torch.tensor([t[(p, m)]["curve"] for t in tables.values()])
            mean = curves.mean(0)
            std = curves.std(0) if len(curves) > 1 else torch.zeros_like(mean)
            line, = ax.plot(range(1, a.rounds + 1), mean, label=m)
            ax.fill_between(range(1, a.rounds + 1), mean - std, mean + std, color=line.get_color(), alpha=0.15)
        ax.set_title(f"{p}: personalised test accuracy (mean ± std over seeds)")
        ax.set_xlabel("round")
        ax.set_ylim(0, 1)
    fig.axes[0].legend(fontsize=7)
    order = ("true", "smashed (every method)", "gradient (FedV)", "losses only (FedVZ strict)")
    rows = [k for k in order if k in imgs]
    for r, name in enumerate(rows):
        for c in range(n):
            ax = fig.add_subplot(2 * len(rows), n, (len(rows) + r) * n + c + 1)
            ax.imshow(imgs[name][c, 0].numpy(), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=6, rotation=0, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/fedv")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--readme", action="store_true", help="write the accuracy tables into the plugin README")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=5, help="local epochs (paper: 5)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3, help="client Adam learning rate (every method)")
    parser.add_argument("--lr-server", type=float, default=1e-3, help="FedV/FedVZ once-per-round encoder SGD step")
    parser.add_argument("--lr-server-splitfed", type=float, default=1e-3, help="SplitFed per-batch server SGD")
    parser.add_argument("--fedround", type=int, default=5)
    parser.add_argument("--head-init", default="pretrained", choices=("pretrained", "random"))
    parser.add_argument("--pretrain-epochs", type=int, default=120)
    parser.add_argument("--attack-batch", type=int, default=16)
    parser.add_argument("--attack-steps", type=int, default=300)
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _, info = pretrained_for_target("micro-vit", epochs=a.pretrain_epochs)
    train, test = load_digits(classes=(5, 6, 7, 8, 9))
    tables = {seed: run_table(a, train, test, seed) for seed in a.seeds}
    priv = privacy(a, train, test)
    seconds = time.perf_counter() - t0
    text = write(a, tables, priv, info, seconds)
    print(text)
    (out / "results.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(
        {"args": vars(a), "pretrain": info,
         "tables": {str(s): {f"{p}/{m}": v for (p, m), v in t.items()} for s, t in tables.items()},
         "privacy": {k: v for k, v in priv.items() if k != "images"}}, indent=1))
    figure(a, tables, priv, out / "fedv_reproduce.png")
    if a.readme:
        command = "nice python examples/fedv_reproduce.py --out runs/fedv --readme"
        replace_block(README, "fedv-results", f"**Command:** `{command}`\n\n{text}")
        print(f"wrote the tables into {README}")


if __name__ == "__main__":
    main()
