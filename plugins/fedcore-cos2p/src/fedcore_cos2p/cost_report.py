"""The README's memory and FLOP table (spec 004 §6 R2, R3): counted, not trained, so there is no seed to sweep.

    python -m fedcore_cos2p.cost_report --write plugins/fedcore-cos2p/README.md

:func:`fedcore_cos2p.costs.cost_table` counts parameters, FLOPs and the Adan training-memory model on sliced
submodels of the paper's E1 ViT; every number is fixed by the shapes and budgets, the same on every call. This
writes them to ``results/results-costs.json`` next to the README and the table, with the paper's memory and
time claims against FedRolex, between ``<!-- generated:cos2p-costs -->`` and ``<!-- /generated:cos2p-costs -->``.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import json
from pathlib import Path
from typing import Any

TAG = "cos2p-costs"
CO_S2P = ("Co-S2P (window at 0)", "Co-S2P (window at top)")
FEDROLEX = "FedRolex (beta = R)"


def _holds(changes: dict[str, list[float]], claimed: float) -> str:
    """yes (every device and window position at or below the claimed change), partly (saying where), or no."""
    where = [device for device, c in changes.items() if max(c) <= claimed]
    if len(where) == len(changes):
        return "yes"
    if where:
        return f"partly: on {', '.join(where)} only"
    some = [device for device, c in changes.items() if min(c) <= claimed]
    if some:
        return f"partly: only at one window position on {', '.join(some)}"
    return "partly: smaller savings only" if min(min(c) for c in changes.values()) < 0 else "no"


def cost_block(costs: Sequence[dict[str, Any]]) -> str:
    lines = ["| device | R_n | batch | method | trainable params | frozen params | memory MB | GFLOP/sample |",
             "|---|---|---|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c['device']} | {c['budget']} | {c['batch']} | {c['method']} | {c['trainable_params']:,} | "
                     f"{c['frozen_params']:,} | {c['memory_bytes'] / 2**20:.0f} | {c['flops_per_sample'] / 1e9:.2f} |")
    mem: dict[str, list[float]] = {}
    flop: dict[str, list[float]] = {}
    for device in dict.fromkeys(c["device"] for c in costs):
        rows = {c["method"]: c for c in costs if c["device"] == device}
        mem[device] = [rows[key]["memory_bytes"] / rows[FEDROLEX]["memory_bytes"] - 1 for key in CO_S2P]
        flop[device] = [rows[key]["flops_per_sample"] / rows[FEDROLEX]["flops_per_sample"] - 1 for key in CO_S2P]

    def span(changes: dict[str, list[float]]) -> str:
        return "; ".join(f"{d} {min(c):+.1%} to {max(c):+.1%}" for d, c in changes.items())

    lines += ["", "| claim (vs FedRolex, β = R_n) | counted change per device (window at 0 and at the top) | holds? | "
              "how |", "|---|---|---|---|",
              f"| −22% memory | {span(mem)} | {_holds(mem, -0.22)} | memory model, equal trainable-parameter budget |",
              f"| −24% time | {span(flop)} | {_holds(flop, -0.24)} | compute time ∝ training FLOPs per sample on the "
              f"same device |"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="README", help="replace the marked block in this README and "
                        "write results/results-costs.json next to it")
    args = parser.parse_args(argv)
    import torch

    from fedcore_cos2p.costs import cost_table

    torch.set_num_threads(1)
    costs = cost_table()
    block = cost_block(costs)
    print(block)
    if args.write:
        (args.write.parent / "results").mkdir(exist_ok=True)
        (args.write.parent / "results" / "results-costs.json").write_text(json.dumps({"costs": costs}, indent=1) + "\n")
        _replace(args.write, block)


def _replace(readme: Path, block: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- generated:{TAG} -->", f"<!-- /generated:{TAG} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{readme} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    tail = rest.split(end)[1]
    readme.write_text(f"{head}{start}\n{block}\n{end}{tail}")


if __name__ == "__main__":
    main()
