"""The Co-S2P README's memory rows (spec 004 §6 R2) from the paper-scale dry run, beside the plugin's cost model.

    python repro/memory_dryrun.py --write README.md

``fedcore plan examples/paper/cos2p_imagenet200.toml`` (E1: ViT-Tiny*, 224², 8 Jetson clients) builds every
client's real share on the meta device and counts weights held + gradients of the trained weights + Adan's 4
states per trained weight + the activations autograd saves at the local update's batch. This runs that dry run
for Co-S2P in its first weight round (round index 20, masks binarized: the rolling window at the top of the
model for every client) and the next (index 21: the window at block 0), for FedRolex (this plugin's share with
rolling width at full depth, β = R_n on heads and MLP units, the sweep's ``fedrolex`` variant) and for the full
model, each at the paper's per-type batch (NX8 8, AGX32 64, AGX64 128), and sets the analytic cost model
(``fedcore_cos2p.costs.cost_table``: the same sliced submodels counted directly, activations measured at batch 1
and scaled) beside it. Everything is fixed by shapes; no data, weights or seed changes it. Writes the block
between ``<!-- generated:cos2p-memory -->`` and ``<!-- /generated:cos2p-memory -->`` and
``results/results-memory-dryrun.json`` next to the README.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
from pathlib import Path
from typing import Any

TAG = "cos2p-memory"
CONFIG = Path(__file__).resolve().parents[3] / "examples" / "paper" / "cos2p_imagenet200.toml"
BATCH = {"jetson-nx8": 8, "jetson-agx32": 64, "jetson-agx64": 128}
BUDGETS = "{ jetson-nx8 = 0.0625, jetson-agx32 = 0.5625, jetson-agx64 = 0.5625 }"
SYNC = ["recipe=\"co-s2p-sync\"", "pipeline.schedule={ name = \"uniform\", fraction = 1.0 }",
        "pipeline.local_update.kd_weight=0.0", "pipeline.local_update.personal_exits=false"]
METHODS: dict[str, tuple[int, list[str]]] = {
    "Co-S2P (window at top)": (20, []),
    "Co-S2P (window at 0)": (21, []),
    "FedRolex (beta = R)": (20, [*SYNC, f"pipeline.split={{ name = \"cos2p-share\", mask_rounds = 20, budgets = "
                                        f"{BUDGETS}, width = \"rolling\", depth = \"full\" }}"]),
    "full model": (20, [*SYNC, "pipeline.split={ name = \"cos2p-share\", mask_rounds = 20, budget = 1.0, "
                               "width = \"rolling\", depth = \"full\" }"]),
}
PARTS = ("params", "grads", "optimizer", "activations")


def dry_rows() -> list[dict[str, Any]]:
    """One row per (device type, method): the dry run's memory parts of that type's client at its batch."""
    from fedcore.experiment import dry_run, load_config, plan

    rows = []
    for method, (round_index, sets) in METHODS.items():
        for device, batch in BATCH.items():
            config = load_config(CONFIG, [*sets, f"pipeline.local_update.batch_size={batch}"])
            dry = dry_run(plan(config), round=round_index)
            client = next(c for c in dry.clients if c.profile == device)
            rows.append({"device": device, "batch": batch, "method": method, "round": round_index,
                         "trainable_params": client.params_trained,
                         "frozen_params": client.params_held - client.params_trained,
                         **{part: int(client.memory[part]) for part in PARTS},
                         "memory_bytes": int(client.memory_total)})
    return rows


def memory_block(dry: Sequence[dict[str, Any]], model: Sequence[dict[str, Any]]) -> str:
    analytic = {(r["device"], r["method"]): r for r in model}
    mib = 2 ** 20
    lines = ["| device | batch | method | trained / frozen params (dry run) | weights MiB | grads MiB | Adan MiB | "
             "activations MiB | **dry run MiB** | cost model MiB | dry / model |", "|---|---:|---|---|---:|---:|"
             "---:|---:|---:|---:|---:|"]
    for r in dry:
        m = analytic.get((r["device"], r["method"]))
        model_mib = f"{m['memory_bytes'] / mib:.0f}" if m else "-"
        ratio = f"{r['memory_bytes'] / m['memory_bytes']:.2f}" if m else "-"
        lines.append(f"| {r['device']} | {r['batch']} | {r['method']} | {r['trainable_params']:,} / "
                     f"{r['frozen_params']:,} | " + " | ".join(f"{r[p] / mib:.0f}" for p in PARTS) +
                     f" | **{r['memory_bytes'] / mib:.0f}** | {model_mib} | {ratio} |")
    by = {(r["device"], r["method"]): r["memory_bytes"] for r in dry}
    lines += ["", "| claim | dry run: Co-S2P vs FedRolex (β = R_n), window at the top / at 0 | cost model, same |",
              "|---|---|---|"]
    for device in BATCH:
        cells = []
        for source in (by, {k: v["memory_bytes"] for k, v in analytic.items()}):
            base = source[(device, "FedRolex (beta = R)")]
            cells.append(" / ".join(f"{source[(device, w)] / base - 1:+.1%}"
                                    for w in ("Co-S2P (window at top)", "Co-S2P (window at 0)")))
        lines.append(f"| −22% memory, {device} (batch {BATCH[device]}) | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="README", help="replace the marked block in this README and "
                        "write results/results-memory-dryrun.json next to it")
    args = parser.parse_args(argv)
    import torch

    from fedcore.experiment import emit
    from fedcore_cos2p.costs import cost_table

    torch.set_num_threads(1)
    dry, model = dry_rows(), cost_table()
    if args.write:
        (args.write.parent / "results").mkdir(exist_ok=True)
        (args.write.parent / "results" / "results-memory-dryrun.json").write_text(
            json.dumps({"dry_run": dry, "cost_model": model}, indent=1) + "\n")
    emit(memory_block(dry, model), args.write, TAG)


if __name__ == "__main__":
    main()
