"""CPU seconds per round of one Co-S2P cell, and a cProfile of one mask round and one weight round: where a round's
CPU goes (torch's arithmetic or fedcore/plugin Python) and the achieved GFLOP/s against the clock's FLOP count.

    nice -n 19 python repro/profile_round.py repro/cos2p_spec_scale.toml --out runs/cos2p-spec-scale-timing

Two runs of ``--rounds`` rounds with ``--mask-rounds`` mask rounds (default 3 and 2: mask, mask, weight). The first
is timed only: the CPU seconds of each round are ``time.process_time`` differences between the ends of rounds (round
1 also pays the set-up, so it is reported apart). The second profiles round 2 (a mask round) and round 3 (a weight
round) with cProfile on CPU time (``time.process_time``, so other processes' load does not enter). The FLOPs are the
history's ``virtual_flops`` (the clock's count of what each share trained, from the cost model), so GFLOP/s =
FLOPs / CPU seconds. Writes ``timing.json`` and one ``.prof`` and ``.txt`` per profiled round under ``--out``.

The CPU hours of the README's sweeps at full §6 scale, from that timing and the scaled sweeps' recorded FLOPs:

    python repro/profile_round.py --estimate runs/cos2p-spec-scale-timing/timing.json runs/cos2p-sweep \
        runs/cos2p-schedule-sweep

Every scaled cell's FLOPs per mask round and per weight round (its history's ``virtual_flops``) times the §6/scaled
ratio of training samples, over §6's Q = 40 rounds with Q̂ = 8 mask rounds (Co-S2P(Async.): 5x its merges), divided
by the achieved FLOP/s of that phase in the §6 timing: what a cell costs if CPU time follows the FLOPs.
"""
from __future__ import annotations

import argparse
import cProfile
import json
from pathlib import Path
import pstats
import shutil
import sys
import time
from typing import Any

from fedcore.experiment import load_config, prepare, run_experiment

TORCH_FILES = ("/torch/", "<built-in method torch.", "{built-in method torch.", "{method '", "<method '")


def run(config: str, out: Path, rounds: int, mask_rounds: int, profile: set[int] | None) -> list[dict[str, Any]]:
    """One run; the CPU seconds at the end of each round, and the profiles of the rounds in ``profile``."""
    m = prepare(config, [f"rounds={rounds}", f"pipeline.split.mask_rounds={mask_rounds}"])
    rows: list[dict[str, Any]] = []
    profilers: dict[int, cProfile.Profile] = {}

    def on_round(row: dict[str, Any]) -> None:
        done = len(rows) + 1  # 1-based round that just ended
        now = time.process_time()
        if done in profilers:
            profilers[done].disable()
        rows.append({**row, "cpu_end": now})
        if profile and done + 1 in profile:
            profilers[done + 1] = cProfile.Profile(time.process_time)
            profilers[done + 1].enable()

    start = time.process_time()
    run_experiment(m, out=out / "run", overwrite=True, progress="none", on_round=on_round)
    for i, row in enumerate(rows):
        row["cpu_s"] = row["cpu_end"] - (rows[i - 1]["cpu_end"] if i else start)
    for q, prof in profilers.items():
        prof.dump_stats(str(out / f"round-{q}.prof"))
        with open(out / f"round-{q}.txt", "w") as fh:
            stats = pstats.Stats(prof, stream=fh)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(60)
    return rows


def torch_share(prof_path: Path) -> dict[str, float]:
    """Own (tottime) CPU seconds of the profiled round: inside torch (its C++ kernels, autograd's backward, its
    Python wrappers) against everything else (fedcore, the plugin, the standard library)."""
    stats = pstats.Stats(str(prof_path))
    total = inside = 0.0
    by_home: dict[str, float] = {}
    for (file, _line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tt
        where = f"{file}:{name}"
        home = ("torch" if any(t in where for t in TORCH_FILES) or "torch" in file
                else "fedcore" if "/fedcore/" in file else "plugin" if "/plugins/" in file or "/substrates/" in file
                else "other")
        inside += tt if home == "torch" else 0.0
        by_home[home] = by_home.get(home, 0.0) + tt
    return {"total_s": total, "torch_s": inside, **{f"{k}_s": v for k, v in sorted(by_home.items())}}


SPEC_ROUNDS, SPEC_MASK_ROUNDS, SPEC_SAMPLES = 40, 8, 8000  # spec 004 §6 (repro/cos2p_spec_scale.toml)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def estimate(timing: Path, sweeps: list[Path]) -> dict[str, Any]:
    """CPU hours of every cell of ``sweeps`` at §6 scale (see the module docstring)."""
    report = json.loads(timing.read_text())
    rate = {phase: sum(r["flops"] for r in report["timed"][1:] if r["phase"] == phase)
            / sum(r["cpu_s"] for r in report["timed"][1:] if r["phase"] == phase) for phase in ("mask", "weight")}
    out: dict[str, Any] = {"flop_per_cpu_s": rate, "sweeps": {}}
    for sweep in sweeps:
        total_s, cells = 0.0, 0
        for metrics in sorted(sweep.glob("*/seed-*/metrics.jsonl")):
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            cfg = load_config(metrics.parent / "config.toml")
            split = cfg["pipeline"]["split"]
            learned = split.get("width", "learned") == "learned" and split.get("random_masks", "none") != "both"
            mask_q = int(split.get("mask_rounds", 8)) if learned else 0
            mask = [float(r["virtual_flops"]) for r in rows[:mask_q]]
            weight = [float(r["virtual_flops"]) for r in rows[mask_q:]]
            scale = SPEC_SAMPLES / int(cfg["dataset"]["n"])
            if cfg["pipeline"]["schedule"].get("arrivals") == 1:  # Co-S2P(Async.)'s merges: 5x them, as 40/8 rounds
                seconds = scale * (SPEC_ROUNDS / 8) * (sum(mask) / rate["mask"] + sum(weight) / rate["weight"])
            else:
                spec_mask = SPEC_MASK_ROUNDS if mask else 0
                seconds = scale * (spec_mask * _mean(mask) / rate["mask"]
                                   + (SPEC_ROUNDS - spec_mask) * _mean(weight) / rate["weight"])
            total_s, cells = total_s + seconds, cells + 1
        out["sweeps"][str(sweep)] = {"cells": cells, "cpu_hours": total_s / 3600}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--estimate", nargs="+", type=Path, metavar=("TIMING_JSON", "SWEEP"),
                    help="CPU hours of these scaled sweeps at §6 scale, from a timing.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mask-rounds", type=int, default=2)
    ap.add_argument("--no-profile", action="store_true", help="the timed run only")
    args = ap.parse_args(argv)
    if args.estimate:
        json.dump(estimate(args.estimate[0], args.estimate[1:]), sys.stdout, indent=1)
        return 0
    if args.config is None or args.out is None:
        ap.error("give CONFIG and --out (or --estimate TIMING_JSON SWEEP...)")
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    report: dict[str, Any] = {"config": args.config, "rounds": args.rounds, "mask_rounds": args.mask_rounds}
    timed = run(args.config, args.out, args.rounds, args.mask_rounds, None)
    report["timed"] = [{"round": i + 1, "phase": "mask" if i < args.mask_rounds else "weight",
                        "cpu_s": r["cpu_s"], "wall_s": r["round_wall_s"], "flops": r["virtual_flops"],
                        "gflop_per_cpu_s": r["virtual_flops"] / r["cpu_s"] / 1e9,
                        "test_accuracy": r["test_accuracy"]} for i, r in enumerate(timed)]
    if not args.no_profile:
        profiled = run(args.config, args.out, args.rounds, args.mask_rounds, {2, args.rounds})
        report["profiled"] = {q: {"cpu_s": profiled[q - 1]["cpu_s"], **torch_share(args.out / f"round-{q}.prof")}
                              for q in (2, args.rounds)}
        report["bit_identical"] = all(a["test_accuracy"] == b["test_accuracy"] and a["train_loss"] == b["train_loss"]
                                      for a, b in zip(timed, profiled))
    (args.out / "timing.json").write_text(json.dumps(report, indent=1))
    json.dump(report, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
