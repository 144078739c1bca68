"""Co-S2P's micro reproduction (spec 004 §6, R1-R8): one command, tables and plots into the plugin README.

    python -m fedcore_cos2p.reproduce --out runs/cos2p            # the whole thing (see README for the time)
    python -m fedcore_cos2p.reproduce --out runs/cos2p --part main     # the same in two processes:
    python -m fedcore_cos2p.reproduce --out runs/cos2p --part extra    # (then --report)
    python -m fedcore_cos2p.reproduce --out runs/cos2p --report   # rewrite README tables from the results files

Micro-E1: 8 clients (1 NX8, 3 AGX32, 4 AGX64, Jetson profiles with a speed ratio r calibrated so that
synchronous FedAvg(Full) has the paper's E1 RU of 63.5%), Tab. 7 budgets and data quotas, Dirichlet 1.5,
a depth-8 micro ViT (D = 32, 4 heads, 8x8 inputs) on seeded 10-class synthetic patterns, random init.
Every run's result is appended to results-<part>.json as soon as it ends, so an interrupted run keeps its rows
and a second call continues where it stopped.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import time
from typing import Any

import torch

import fedcore
from fedcore.builtin import SemiAsyncSchedule, UniformSync
from fedcore.data import synthetic_classification
from fedcore.errors import ConfigError
from fedcore.models import micro_vit
from fedcore.runtime import SimClock, jetson_presets
from fedcore_cos2p.aggregate import Cos2pAggregate
from fedcore_cos2p.metrics import run_ru, staleness_histogram
from fedcore_cos2p.partition import QuotaDirichletPartition
from fedcore_cos2p.share import Cos2pShare
from fedcore_cos2p.update import Cos2pUpdate

E1_BUDGETS = {"jetson-nx8": 0.0625, "jetson-agx32": 0.5625, "jetson-agx64": 0.5625}
PROFILES = ["jetson-nx8"] + ["jetson-agx32"] * 3 + ["jetson-agx64"] * 4
QUOTAS = [8277] + [24960] * 3 + [36992] * 4
PAPER_RU_FEDAVG_E1 = 0.635


def data(seed: int = 0) -> tuple[Any, Any]:
    full = synthetic_classification(n=2400, num_classes=10, noise=1.5, seed=seed)
    return full.subset(range(1600)), full.subset(range(1600, 2400))


def model(seed: int) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return micro_vit(num_classes=10, embed_dim=32, depth=8, num_heads=4)


def methods(t_clk: float) -> dict[str, dict[str, Any]]:
    """name -> pipeline parts (schedule, share, update, aggregate) and the round multiplier."""
    co = dict(share=Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2), update=Cos2pUpdate(lr=0.005, epochs=1),
              aggregate=Cos2pAggregate(), schedule=SemiAsyncSchedule(mu=0.5, t_clk=t_clk))
    base_update = Cos2pUpdate(lr=0.005, epochs=1, kd_weight=0.0, personal_exits=False)
    sync = UniformSync(fraction=1.0)
    return {
        "Co-S2P": co,
        "FedRolex": dict(share=Cos2pShare(budgets=E1_BUDGETS, width="rolling", depth="full"), update=base_update,
                         aggregate=Cos2pAggregate(weighting="uniform"), schedule=sync),
        "HeteroFL": dict(share=Cos2pShare(budgets=E1_BUDGETS, width="prefix", depth="full"), update=base_update,
                         aggregate=Cos2pAggregate(weighting="uniform"), schedule=sync),
        "FedAvg(Full)": dict(share=Cos2pShare(budget=1.0, width="rolling", depth="full"), update=base_update,
                             aggregate=Cos2pAggregate(weighting="samples"), schedule=sync),
        "Co-S2P(Async.)": {**co, "schedule": SemiAsyncSchedule(arrivals=1, t_clk=0.0), "rounds_factor": 3},
        "random masks (linear)": {**co, "share": Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2, random_masks="linear")},
        "random masks (MSA)": {**co, "share": Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2, random_masks="msa")},
        "random masks (both)": {**co, "share": Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2, random_masks="both")},
        "no self-distillation": {**co, "update": Cos2pUpdate(lr=0.005, epochs=1, kd_weight=0.0)},
        "ratio 2": {**co, "share": Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2, ratio=2.0)},
        "ratio 0.5": {**co, "share": Cos2pShare(budgets=E1_BUDGETS, mask_rounds=2, ratio=0.5)},
    }


def calibrate_ratio(train_sizes: list[int], target: float = PAPER_RU_FEDAVG_E1) -> float:
    """r = AGX64/NX speed such that synchronous FedAvg(Full) has RU = target (compute ∝ samples / speed)."""
    def ru(r: float) -> float:
        table = jetson_presets(r)
        times = [n / table[p].flops for n, p in zip(train_sizes, PROFILES)]
        return sum(times) / (len(times) * max(times))

    lo, hi = 1.0, 50.0
    for _ in range(60):  # RU falls as the NX board falls behind
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ru(mid) > target else (lo, mid)
    return (lo + hi) / 2


def run_one(name: str, parts: dict[str, Any], *, seed: int, rounds: int, ratio: float) -> dict[str, Any]:
    train, test = data()
    pipeline = fedcore.Pipeline([QuotaDirichletPartition(quotas=QUOTAS, alpha=1.5), parts["schedule"],
                                 parts["share"], parts["update"], parts["aggregate"]])
    start = time.process_time()
    history = list(pipeline.run(model=model(seed), train=train, test=test, num_clients=8,
                                rounds=rounds * parts.get("rounds_factor", 1), seed=seed,
                                clock=SimClock(jetson_presets(ratio)), profiles=PROFILES).history)
    return {"method": name, "seed": seed, "cpu_s": time.process_time() - start,
            "curve": [(r.get("virtual_time", 0.0), r.get("test_accuracy")) for r in history],
            "ru": run_ru(history), "busy": history[-1].get("utilisation"),
            "staleness": staleness_histogram(history), "final_accuracy": history[-1].get("test_accuracy")}


def median_round_time(ratio: float, seed: int = 0) -> float:
    """Median client round time (virtual s) of Co-S2P in one synchronous round, to scale T_clk (spec §6)."""
    co = methods(0.0)["Co-S2P"]
    result = run_one("probe", {**co, "schedule": UniformSync(fraction=1.0)}, seed=seed, rounds=1, ratio=ratio)
    return float(result["curve"][0][0])


PARTS = ("main", "extra")
"""``main``: seed 0 of every method, then the other paired seeds; ``extra``: ablations, ratio, μ × T_clk grid
and the E1-scale memory/FLOP model. The two parts can run as two processes; the report merges their files."""


def plan_for(part: str, seeds: int) -> list[tuple[str, int]]:
    if part == "main":
        first = [(m, 0) for m in ("Co-S2P", "FedRolex", "HeteroFL", "FedAvg(Full)", "Co-S2P(Async.)")]
        return first + [(m, s) for s in range(1, seeds) for m in ("Co-S2P", "FedRolex")]
    return [(m, 0) for m in ("random masks (linear)", "random masks (MSA)", "random masks (both)",
                             "no self-distillation", "ratio 2", "ratio 0.5")]


def load_results(out: Path) -> dict[str, Any]:
    """Every part's results merged (runs, grid, costs, calibration)."""
    merged: dict[str, Any] = {"runs": [], "grid": []}
    for path in sorted(out.glob("results-*.json")):
        part = json.loads(path.read_text())
        merged["runs"] += part.get("runs", [])
        merged["grid"] += part.get("grid", [])
        for key in ("costs", "calibration"):
            if key in part:
                merged[key] = part[key]
    return merged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/cos2p"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=3, help="seeds for the paired Co-S2P vs FedRolex comparison")
    parser.add_argument("--part", choices=PARTS + ("all",), default="all")
    parser.add_argument("--report", action="store_true", help="only rewrite the README from the results files")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for part in (PARTS if args.part == "all" else (args.part,)):
        if not args.report:
            run_part(part, args)
    from fedcore_cos2p.report import write_report

    write_report(load_results(args.out), Path(__file__).resolve().parents[2])


def run_part(part: str, args: argparse.Namespace) -> None:
    path = args.out / f"results-{part}.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"runs": [], "grid": []}

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(path)

    sizes = [len(p) for p in QuotaDirichletPartition(quotas=QUOTAS).fedcore_partition(
        dataset=data()[0], num_clients=8, run=_run_for_partition()).train]
    ratio = calibrate_ratio(sizes)
    if "calibration" not in results:
        results["calibration"] = {"ratio": ratio, "train_sizes": sizes, "target_ru": PAPER_RU_FEDAVG_E1,
                                  "median_round_s": median_round_time(ratio)}
        save()
    median = results["calibration"]["median_round_s"]
    table = methods(0.25 * median)
    done = {(r["method"], r["seed"]) for r in results["runs"]}
    for name, seed in plan_for(part, args.seeds):
        if (name, seed) in done:
            continue
        try:
            results["runs"].append(run_one(name, table[name], seed=seed, rounds=args.rounds, ratio=ratio))
        except ConfigError as exc:
            results["runs"].append({"method": name, "seed": seed, "refused": str(exc)})
        save()
    if part != "extra":
        return
    for mu in (0.25, 0.5, 1.0):
        for factor in (0.0, 0.5):
            if any(g["mu"] == mu and g["t_clk_factor"] == factor for g in results["grid"]):
                continue
            parts = {**table["Co-S2P"], "schedule": SemiAsyncSchedule(mu=mu, t_clk=factor * median)}
            row = run_one(f"mu={mu} T_clk={factor}", parts, seed=0, rounds=max(4, args.rounds // 2), ratio=ratio)
            results["grid"].append({"mu": mu, "t_clk_factor": factor, "accuracy": row["final_accuracy"],
                                    "ru": row["ru"], "virtual_time": row["curve"][-1][0]})
            save()
    if "costs" not in results:
        from fedcore_cos2p.costs import cost_table

        results["costs"] = cost_table()
        save()


def _run_for_partition() -> Any:
    from fedcore import RunContext, ServerState

    return RunContext(seed=0, num_clients=8, rounds=1, train=None, server=ServerState(model=torch.nn.Module()))


if __name__ == "__main__":
    main()
