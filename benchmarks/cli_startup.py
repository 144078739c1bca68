"""How long the ``fedcore`` command takes to answer, against ``python -c "import torch"`` on the same machine.

Issue 30's targets: ``fedcore describe fedavg`` at most 1.5x ``import torch``; ``import fedcore`` at most
``import torch`` + 0.3 s. Each case is a fresh process (what a user or a test harness pays), timed as wall clock
from start to exit; for ``fedcore run`` the time from start to the progress line of round 1. Every repetition runs
the reference and the cases interleaved, in an order that rotates, so load from other jobs hits them alike; the
script prints the minimum and median over repetitions of the per-repetition ratio (case / reference) and
difference (case - reference), the load average and the machine. A ratio from a shared machine is an indication;
the lead's figures come from a quiet one.

    python benchmarks/cli_startup.py                        # 7 repetitions, every case (~2-3 min when quiet)
    python benchmarks/cli_startup.py --reps 3 --cases describe-name,import-fedcore
    python benchmarks/cli_startup.py --before /tmp/old      # also the same cases from another source checkout

``--before DIR`` measures the code of a second checkout (e.g. ``git archive <commit> | tar -x -C /tmp/old``) with this
interpreter and its installed third-party packages, by putting DIR's source roots first on ``PYTHONPATH``; its
cases run interleaved with the others and print as ``before:<case>``.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
import os
from pathlib import Path
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/fedavg_dirichlet.toml"
REFERENCE = "import-torch"
CASES: dict[str, list[str]] = {
    REFERENCE: ["-c", "import torch"],
    "import-fedcore": ["-c", "import fedcore"],
    "help": ["-m", "fedcore", "--help"],
    "plugins": ["-m", "fedcore", "plugins"],
    "describe-name": ["-m", "fedcore", "describe", "fedavg"],
    "describe-config": ["-m", "fedcore", "describe", CONFIG],
    "run-round-1": ["-m", "fedcore", "run", CONFIG, "--set", "rounds=1", "--progress", "plain", "--overwrite"],
}
"""The arguments to the Python interpreter of each case. ``run-round-1`` stops the clock at its round-1 line."""
ROUND_ONE = "round 1/"
TARGETS = {"describe-name": ("ratio", 1.5), "import-fedcore": ("difference", 0.3)}
"""Issue 30: ``describe fedavg`` / ``import torch`` <= 1.5; ``import fedcore`` - ``import torch`` <= 0.3 s."""


def source_path(checkout: Path) -> str:
    """PYTHONPATH that makes a checkout's fedcore, substrates and plugins shadow the installed (editable) ones."""
    roots = [checkout, *sorted(checkout.glob("substrates/*/src")), *sorted(checkout.glob("plugins/*/src"))]
    return os.pathsep.join(str(p) for p in roots)


def time_once(args: Sequence[str], env: dict[str, str], out: Path, cwd: Path = ROOT) -> float:
    """Wall seconds of one fresh interpreter running ``args`` in ``cwd`` (to its round-1 line for a run)."""
    argv = [sys.executable, *args]
    if "run" in args:
        argv += ["--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = None
    for line in proc.stderr:
        if seen is None and "run" in args and ROUND_ONE in line:
            seen = time.perf_counter() - start
    code = proc.wait()
    total = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited with status {code}")
    if "run" in args:
        if seen is None:
            raise SystemExit(f"{' '.join(argv)} printed no {ROUND_ONE!r} line")
        return seen
    return total


def machine() -> str:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = "?"
    cpu = platform.processor() or platform.machine()
    return (f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, Python "
            f"{platform.python_version()}, torch {torch_version}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="repetitions of every case (default 7)")
    parser.add_argument("--cases", default=",".join(c for c in CASES if c != REFERENCE),
                        help=f"comma-separated cases (default all): {', '.join(c for c in CASES if c != REFERENCE)}")
    parser.add_argument("--before", type=Path, help="a second source checkout measured beside this one")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    contenders: list[tuple[str, list[str], dict[str, str], Path]] = [(REFERENCE, CASES[REFERENCE], env, ROOT)]
    contenders += [(c, CASES[c], env, ROOT) for c in cases]
    if args.before is not None:  # run in the checkout too: the working directory comes first on sys.path
        before = args.before.resolve()
        before_env = {**env, "PYTHONPATH": source_path(before)}
        contenders += [(f"before:{c}", CASES[c], before_env, before) for c in cases]

    print(f"machine: {machine()}")
    start_load = os.getloadavg()[0]
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        for _, case, case_env, cwd in contenders:  # warm the file cache and byte-code once, untimed
            time_once(case, case_env, out, cwd)
        times: dict[str, list[float]] = {name: [] for name, *_ in contenders}
        references: dict[str, list[float]] = {name: [] for name, *_ in contenders}
        for rep in range(args.reps):
            shift = rep % len(contenders)
            order = contenders[shift:] + contenders[:shift]  # rotate who goes first
            for name, case, case_env, cwd in order:  # every case next to a fresh reference: ratio of neighbours
                ref_first = rep % 2 == 0
                if ref_first:
                    ref = time_once(CASES[REFERENCE], env, out)
                value = time_once(case, case_env, out, cwd)
                if not ref_first:
                    ref = time_once(CASES[REFERENCE], env, out)
                times[name].append(value)
                references[name].append(ref)
            print(f"  repetition {rep + 1}/{args.reps} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(f"{'case':<26} {'min s':>7} {'median s':>9} {'ratio min':>10} {'ratio med':>10} {'diff min':>9} "
          f"{'diff med':>9}   (ratio, diff: case vs {REFERENCE} run beside it)")
    summary: dict[str, tuple[float, float, float, float]] = {}
    for name, *_ in contenders:
        ratios = [a / b for a, b in zip(times[name], references[name])]
        diffs = [a - b for a, b in zip(times[name], references[name])]
        summary[name] = (min(ratios), statistics.median(ratios), min(diffs), statistics.median(diffs))
        print(f"{name:<26} {min(times[name]):7.2f} {statistics.median(times[name]):9.2f} {min(ratios):10.2f} "
              f"{statistics.median(ratios):10.2f} {min(diffs):+9.2f} {statistics.median(diffs):+9.2f}")
    print()
    load = max(os.getloadavg()[0], start_load)
    if load > (os.cpu_count() or 1):
        print(f"note: load average {load:.1f} on {os.cpu_count()} CPUs: every process here ran several times slower "
              f"than on a quiet machine, differences in seconds with it; the ratios hold better. Indications only.")
    met = True
    for name, (measure, limit) in TARGETS.items():
        if name not in summary:
            continue
        low, med = summary[name][:2] if measure == "ratio" else summary[name][2:]
        unit = "x" if measure == "ratio" else " s"
        ok = med <= limit
        met &= ok
        print(f"target {name}: {measure} to {REFERENCE} <= {limit}{unit}: min {low:.2f}{unit}, median {med:.2f}{unit} "
              f"-> {'met' if ok else 'NOT met'} (on the median)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
