"""FedVKD vs FedAvg(ViT), FedGKT(CNN), FedAvg(CNN) and edge FedAvg at micro scale, beside the paper's Table 1.

Spec 002 Sec. 6.3: E0 (costs at paper scale, analytic), E1 (server accuracy, synthetic IID p = 0.1 and non-IID
p = 0.2), E2 (edge-model accuracy), E4 (ablations: beta = 0, w_dist = 0, soft server KD on the ViT) and E6
(messages per round, barrier vs asynchronous schedule, staleness). E3 (p = 0.5) and E5 (dataset-size sweep) run
with ``--extra``. Data: SynthPatterns (3x16x16 coloured glyphs, 10 classes); no CIFAR/CINIC/ImageNet, no
pre-trained extractor (FedML's FedGKT initialises from one); every model is random-init and micro-sized.

    nice python examples/fedvkd_reproduce.py              # the table -> plugins/fedcore-fedvkd/README.md

Writes ``results.json`` and ``fedvkd_reproduce.png`` under ``--out`` and (``--readme``) the README section.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
import json
import multiprocessing
from pathlib import Path
import time
from typing import Any

from fedcore_distill import (
    bytes_by_kind,
    edge_model,
    fedavg_cnn_model,
    fedavg_vit_model,
    fedgkt_model,
    fedvkd_model,
    forward_macs,
    num_params,
    paper_models,
    synth_patterns_dataset,
)
import numpy as np
import torch

import fedcore
from fedcore.experiment.statistics import paired, spread
from fedcore.runtime import SimClock

PAPER_TABLE1 = {  # FedVKD paper, Table 1: CIFAR-10 IID / non-IID top-1 (%)
    "FedVKD (ViT)": (75.88, 69.93), "FedAvg (ViT)": (73.91, 68.10), "FedGKT (CNN)": (91.96, 85.17),
    "FedAvg (CNN)": (92.74, 84.36), "FedAvg (edge ResNet-18)": (None, None),
}
BEGIN, END = "<!-- fedvkd-reproduce: begin -->", "<!-- fedvkd-reproduce: end -->"
PARTITIONS = {"IID (p=0.1)": 0.1, "non-IID (p=0.2)": 0.2}
E6 = "E6: FedVKD async (watch/phone/laptop)"
DEVICES = ("watch", "phone", "laptop")  # E6: heterogeneous simulated devices, cycled over the clients


def device_clock(num_clients: int) -> dict[str, Any]:
    """Run arguments of E6: a simulated clock, so the three device kinds finish at different times and
    packets made on older server versions arrive (without a clock every job takes zero virtual time)."""
    return {"clock": SimClock(default_profile="phone"),
            "profiles": [DEVICES[c % len(DEVICES)] for c in range(num_clients)]}


def setup(a: argparse.Namespace) -> dict[str, Any]:
    return {"num_classes": 10, "image_size": a.size, "width": a.width}


def vit_kw(a: argparse.Namespace) -> dict[str, Any]:
    return {"embed_dim": a.embed_dim, "depth": a.depth, "num_heads": 2}


def cnn_kw(a: argparse.Namespace) -> dict[str, Any]:
    return {"server_layers": (2, 2, 2), "server_planes": (a.width, 2 * a.width, 4 * a.width)}


def methods(a: argparse.Namespace) -> dict[str, tuple[Any, Any]]:
    """name -> (pipeline factory, model factory)."""
    s = setup(a)
    kd = {"local_update": {"epochs": a.edge_epochs, "batch_size": a.batch_size, "lr": a.lr},
          "aggregate": {"epochs": a.server_epochs, "batch_size": 2 * a.batch_size, "lr": a.lr}}
    fedavg = {"local_update": {"epochs": a.edge_epochs, "batch_size": a.batch_size, "lr": a.lr}}

    def recipe(name: str, **patch: Any) -> Any:
        base = kd if name in ("fedvkd", "fedgkt") else fedavg
        merged = {**base, **{k: {**base.get(k, {}), **v} for k, v in patch.items()}}
        return lambda: fedcore.recipe(name, **merged)

    vkd = lambda seed: fedvkd_model(**s, **vit_kw(a), seed=seed)  # noqa: E731
    return {
        "FedVKD (ViT)": (recipe("fedvkd"), lambda seed: fedvkd_model(**s, **vit_kw(a), seed=seed)),
        "FedAvg (ViT)": (recipe("fedavg-vit"), lambda seed: fedavg_vit_model(**s, **vit_kw(a), seed=seed)),
        "FedGKT (CNN)": (recipe("fedgkt"), lambda seed: fedgkt_model(**s, **cnn_kw(a), seed=seed)),
        "FedAvg (CNN)": (recipe("fedavg-cnn"), lambda seed: fedavg_cnn_model(**s, **cnn_kw(a), seed=seed)),
        "FedAvg (edge ResNet-18)": (recipe("fedavg-edge"),
                                    lambda seed: edge_model(num_classes=10, width=a.width, seed=seed)),
        "E4: FedVKD beta=0": (recipe("fedvkd", local_update={"beta": 0.0}), vkd),
        "E4: FedVKD w_dist=0": (recipe("fedvkd", aggregate={"w_dist": 0.0}), vkd),
        "E4: ViT + soft server KD": (recipe("fedvkd", aggregate={"loss": "soft-kd"}),
                                     lambda seed: fedvkd_model(**s, **vit_kw(a), seed=seed)),
        E6: (recipe("fedvkd", schedule={"name": "async", "concurrency": max(1, a.clients // 2)}),
             lambda seed: fedvkd_model(**s, **vit_kw(a), seed=seed)),
    }


def job(a: argparse.Namespace, name: str, p: float, seed: int, n: int) -> dict[str, Any]:
    """One run, by name (a worker process rebuilds the method table: its factories are closures)."""
    torch.set_num_threads(1)
    make_pipe, make_model = methods(a)[name]
    pipe = make_pipe().replace(partition=fedcore.get("p-group")(p=p, num_groups=10))
    return run_one(pipe, make_model, seed, a, n, device_clock(a.clients) if name == E6 else {})


def run_one(pipe: Any, make_model: Any, seed: int, a: argparse.Namespace, n: int,
            run_kwargs: dict[str, Any]) -> dict[str, Any]:
    train, test = synth_patterns_dataset(n=n, n_test=a.n_test, num_classes=10, size=a.size, noise=a.noise,
                                         seed=0)
    start, cpu = time.perf_counter(), time.process_time()
    result = pipe.run(model=make_model(seed), train=train, test=test, num_clients=a.clients, rounds=a.rounds,
                      seed=seed, **run_kwargs)
    rows = result.history.rows
    acc = [r.get("test_accuracy") for r in rows]
    ledger = result.run.ledger.to_rows()
    kinds = bytes_by_kind(ledger)
    return {"accuracy": acc, "edge_accuracy": [r.get("edge_accuracy") for r in rows],
            "cls_accuracy": [r.get("cls_accuracy") for r in rows],
            "dist_accuracy": [r.get("dist_accuracy") for r in rows],
            "bytes_per_round": sum(r["bytes_up"] + r["bytes_down"] for r in rows) / len(rows),
            "bytes_by_kind_per_round": {d: {k: v / len(rows) for k, v in ks.items() if v} for d, ks in kinds.items()},
            "messages_per_round": sum(1 for x in ledger if x["nbytes"]) / len(rows),
            "staleness_max": max((r.get("max_staleness") or 0) for r in rows),
            "stale_arrivals": sum(1 for r in rows if r.get("max_staleness")),
            "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def edge_macs_per_round(name: str, a: argparse.Namespace, n: int) -> float:
    """Forward MACs per sample of what runs on the edge, times samples x (3 per trained epoch + 1 extraction)."""
    s, shape = setup(a), (3, a.size, a.size)
    if name.startswith("FedAvg (ViT)"):
        per, passes = forward_macs(fedavg_vit_model(**s, **vit_kw(a)), shape), 3 * a.edge_epochs
    elif name.startswith("FedAvg (CNN)"):
        per, passes = forward_macs(fedavg_cnn_model(**s, **cnn_kw(a)), shape), 3 * a.edge_epochs
    elif name.startswith("FedAvg (edge"):
        per, passes = forward_macs(edge_model(num_classes=10, width=a.width), shape), 3 * a.edge_epochs
    else:
        per, passes = forward_macs(edge_model(num_classes=10, width=a.width), shape), 3 * a.edge_epochs + 1
    return float(per * passes * n)


def paper_costs() -> list[tuple[str, str, str]]:
    rows = []
    for image, shape, fmap in (("cifar", (3, 32, 32), (64, 32, 32)), ("imagenet", (3, 224, 224), (64, 56, 56))):
        m = paper_models(image)
        edge = forward_macs(m["edge"], shape)
        for label, module, inp in (("edge extractor (conv1+layer1)", m["extractor"], shape),
                                   ("edge ResNet-18 (FedVKD/FedGKT edge)", m["edge"], shape),
                                   ("ViT-B server (+ patch embed)", m["vit_server"], fmap),
                                   ("ResNet-109 server", m["resnet109"], fmap),
                                   ("FedAvg(ViT) edge model", m["fedavg_vit"], shape),
                                   ("FedAvg(CNN) ResNet-113 edge model", m["fedavg_cnn"], shape)):
            rows.append((f"{image}: {label}", f"{num_params(module) / 1e6:.2f} M",
                         f"{forward_macs(module, inp) / 1e9:.3f} G"))
        rows.append((f"{image}: edge MAC ratio FedAvg(ViT) : FedVKD", "",
                     f"{forward_macs(m['fedavg_vit'], shape) / edge:.1f}x"))
        c, h, w = fmap
        rows.append((f"{image}: uplink features per sample (fp32)", "", f"{c * h * w * 4 / 1024:.0f} KiB"))
    return rows


def mean_std(values: list[float]) -> str:
    s = spread([v * 100 for v in values])
    return f"{s.mean:.1f}" if s.std is None else f"{s.mean:.1f} ± {s.std:.1f}"


def versus(other: list[float], base: list[float]) -> str:
    """Paired difference (points) to the baseline over seeds, with the paired t and Wilcoxon p-values."""
    cmp = paired(dict(enumerate(base)), dict(enumerate(other)))
    if cmp is None:
        return "—"
    p = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    return f"{cmp.mean_diff * 100:+.1f} (t p={p(cmp.t_p)}, W p={p(cmp.wilcoxon_p)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/fedvkd-reproduce")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--size", type=int, default=8, help="image side (16 was not learnable in the CPU budget)")
    ap.add_argument("--noise", type=float, default=0.1, help="SynthPatterns pixel noise (default of the set: 0.3)")
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--embed-dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--edge-epochs", type=int, default=3)
    ap.add_argument("--server-epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16, help="edge batch; the server's is twice this")
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate, edge and server")
    ap.add_argument("--ablation-seeds", type=int, default=1, help="seeds of the E4/E6 rows (CPU budget)")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes, 1 thread each)")
    ap.add_argument("--readme", default="plugins/fedcore-fedvkd/README.md")
    ap.add_argument("--extra", action="store_true", help="also E3 (p = 0.5) and E5 (n in 300, 600, 1200)")
    ap.add_argument("--costs-only", action="store_true", help="only E0 (analytic, about a minute)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    table = methods(a)
    results: dict[str, Any] = {"args": vars(a), "runs": {}}
    partitions = dict(PARTITIONS, **({"stress (p=0.5)": 0.5} if a.extra else {}))
    todo: dict[str, tuple[str, float, int, int]] = {}
    for name in ({} if a.costs_only else table):
        for part, p in partitions.items():
            if name.startswith(("E4", "E6")) and p != 0.2:
                continue
            for seed in range(a.seeds if not name.startswith(("E4", "E6")) else a.ablation_seeds):
                todo[f"{name}|{part}|{seed}"] = (name, p, seed, a.n)
    if a.extra and not a.costs_only:
        for n in (300, 1200):
            for name in ("FedVKD (ViT)", "FedGKT (CNN)"):
                for seed in range(a.seeds):
                    todo[f"E5 n={n}: {name}|IID (p=0.1)|{seed}"] = (name, 0.1, seed, n)
    with ProcessPoolExecutor(a.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {key: pool.submit(job, a, *spec) for key, spec in todo.items()}
        for key, future in futures.items():
            results["runs"][key] = run = future.result()
            print(key, f"best {max(run['accuracy']):.3f}", f"{run['seconds']:.1f}s wall",
                  f"{run['cpu_seconds']:.1f}s CPU", flush=True)
    results["paper_costs"] = paper_costs()
    if not a.costs_only:
        results["edge_macs_per_round"] = {name: edge_macs_per_round(name, a, a.n) for name in table}
    results["seconds"] = time.perf_counter() - start
    (out / "results.json").write_text(json.dumps(results, indent=1))
    section = render_costs(results) if a.costs_only else render(results, a, partitions)
    if not a.costs_only:
        plot(results, a, (Path(a.readme).parent if a.readme else out) / "fedvkd_reproduce.png")
    if a.readme:
        text = Path(a.readme).read_text()
        head, rest = text.split(BEGIN)
        _, tail = rest.split(END)
        Path(a.readme).write_text(f"{head}{BEGIN}\n{section}\n{END}{tail}")
    print(section)


def runs_of(results: dict[str, Any], name: str, part: str) -> list[dict[str, Any]]:
    return [v for k, v in sorted(results["runs"].items()) if k.startswith(f"{name}|{part}|")]


def cost_lines(results: dict[str, Any]) -> list[str]:
    lines = ["**E0: costs at paper scale** (random init, FLOP counter on the meta device; spec §4.4):", "",
             "| model | params | forward MACs / sample |", "|---|---|---|"]
    return lines + [f"| {m} | {p} | {c} |" for m, p, c in results["paper_costs"]]


def render_costs(results: dict[str, Any]) -> str:
    return "\n".join([f"Command: `python examples/fedvkd_reproduce.py --costs-only` "
                      f"({results['seconds']:.0f} s).", "", *cost_lines(results)])


def render(results: dict[str, Any], a: argparse.Namespace, partitions: dict[str, float]) -> str:
    cpu = sum(r["cpu_seconds"] for r in results["runs"].values())
    lines = [f"Command: `nice python examples/fedvkd_reproduce.py --jobs {a.jobs}` ({results['seconds'] / 60:.1f} min "
             f"wall, {cpu / 60:.1f} min CPU in the runs, on a shared 2-core CPU, 1 thread per run). {a.clients} "
             f"clients, p-group (10 groups), SynthPatterns {a.size}x{a.size} noise {a.noise} n={a.n} "
             f"(test {a.n_test}), {a.rounds} rounds, E_c={a.edge_epochs}, E_s={a.server_epochs}, batch "
             f"{a.batch_size}/{2 * a.batch_size}, Adam lr {a.lr}, edge ResNet-18 width {a.width}, ViT width "
             f"{a.embed_dim} depth {a.depth}; {a.seeds} seeds, mean ± std of the best round (E4/E6 rows: "
             f"{a.ablation_seeds} seed). Chance is 10.0 %.",
             "", "**E1/E2: accuracy (%)** — server accuracy = mean over clients of server ∘ extractor_k; "
             "Δ = paired difference to FedAvg (ViT) over seeds, in points, with the paired t-test and Wilcoxon "
             "signed-rank p-values (with 3 seeds the smallest two-sided Wilcoxon p is 0.25).", "",
             "| method | paper C10 IID | paper C10 non-IID | " + " | ".join(f"synth {p}" for p in partitions)
             + " | " + " | ".join(f"Δ vs FedAvg(ViT), {p}" for p in partitions)
             + " | edge acc, non-IID | bytes/round | edge MACs/round |",
             "|---|---|---|" + "---|" * (2 * len(partitions)) + "---|---|---|"]
    bases = {part: [max(r["accuracy"]) for r in runs_of(results, "FedAvg (ViT)", part)] for part in partitions}
    for name in methods(a):
        paper = PAPER_TABLE1.get(name, (None, None))
        cells, deltas = [], []
        for part in partitions:
            best = [max(r["accuracy"]) for r in runs_of(results, name, part)]
            cells.append(mean_std(best) if best else "—")
            deltas.append(versus(best, bases[part]) if best and name != "FedAvg (ViT)" else "—")
        runs = runs_of(results, name, "non-IID (p=0.2)")
        edge = [max(x for x in r["edge_accuracy"] if x is not None) for r in runs if any(r["edge_accuracy"])]
        lines.append(f"| {name} | {paper[0] or '—'} | {paper[1] or '—'} | " + " | ".join(cells + deltas) +
                     f" | {mean_std(edge) if edge else '—'} | {runs[0]['bytes_per_round'] / 1e6:.3f} MB | "
                     f"{results['edge_macs_per_round'][name] / 1e9:.3f} G |")
    vkd = runs_of(results, "FedVKD (ViT)", "non-IID (p=0.2)")[0]
    e6 = runs_of(results, E6, "non-IID (p=0.2)")
    lines += ["", "**E6: messages.** FedVKD per round: " + ", ".join(
        f"{d} {k} {v / 1e3:.0f} kB" for d, ks in vkd["bytes_by_kind_per_round"].items() for k, v in ks.items())
        + f"; {vkd['messages_per_round']:.0f} messages/round (one upload of 4 fields and one download of 2 per "
          f"client; split learning needs 2 per minibatch). Asynchronous FedVKD (FedAsync-style schedule, "
          f"concurrency {max(1, a.clients // 2)}, simulated watch/phone/laptop clients): "
          f"{sum(r['stale_arrivals'] for r in e6)} of {a.rounds * len(e6)} rounds trained on a stale packet, "
          f"max staleness {max(r['staleness_max'] for r in e6):.0f} versions.", ""]
    lines += cost_lines(results)
    lines += ["", "![accuracy per round, mean ± std over seeds](fedvkd_reproduce.png)"]
    return "\n".join(lines)


def plot(results: dict[str, Any], a: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, part in zip(axes[:2], PARTITIONS):
        for name in list(methods(a))[:5]:
            runs = runs_of(results, name, part)
            if runs:
                acc = np.array([r["accuracy"] for r in runs], dtype=float) * 100
                curve, sd = acc.mean(axis=0), acc.std(axis=0, ddof=1) if len(acc) > 1 else np.zeros(acc.shape[1])
                line, = ax.plot(range(1, len(curve) + 1), curve, label=name)
                ax.fill_between(range(1, len(curve) + 1), curve - sd, curve + sd, color=line.get_color(), alpha=0.2)
        ax.set_title(f"server accuracy, synth {part}")
        ax.set_xlabel("round")
        ax.set_ylabel("top-1 (%)")
    axes[0].legend(fontsize=7)
    names = [n for n in methods(a) if runs_of(results, n, "non-IID (p=0.2)")
             and any(runs_of(results, n, "non-IID (p=0.2)")[0]["edge_accuracy"])]
    vals = [np.mean([max(r["edge_accuracy"]) for r in runs_of(results, n, "non-IID (p=0.2)")]) * 100 for n in names]
    axes[2].barh(names, vals)
    axes[2].set_title("edge-model accuracy, non-IID (E2)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
