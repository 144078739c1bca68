"""GPU evidence (issue 23): one prepared run that puts fedcore on an accelerator and writes what it measured.

    # on a lent GPU (no network; torch, timm and peft are there): wheels from scripts/gpu-wheels carried as .whl
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_evidence.py --device cuda --out $OUT --wheels .whl --budget 450
    # the CPU rehearsal (every section at tiny scale)
    python benchmarks/gpu_evidence.py --device cpu --quick --out /tmp/gpu-evidence

Sections, in this order (benchmarks/gpu_evidence.md says what each prints): the environment, ``pytest -m gpu``, the
vectorised cohort on pfl's CIFAR-10 job (50 and 200 clients, ``per-job`` vs ``vectorised`` vs pfl), the
frozen-backbone cohorts (PromptFL, SA-FedLoRA's LoRA stage; 10 and 50 clients), one recipe per substrate in fp32,
bf16 and fp16, a run resumed across devices, ``examples/fedavg_dirichlet.toml``, the paper configs' smoke runs, and
every installed recipe in fp32. ``--out`` receives ``results.json`` and ``results.md`` (rewritten after every
section, so a run cut short still returns what finished), ``log.txt`` and ``pytest-gpu.txt``.

The sections run in a worker process; this process watches it: a section that crashes the worker (a CUDA error
poisons its context) or overruns its time is recorded as such and the next one starts in a fresh worker. A section
starts only if ``--budget`` leaves it its expected time; otherwise it is recorded as skipped, with the reason.
fedcore runs from this checkout (``source_tree.py``: the entry points are written at start; nothing is installed).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_sections  # noqa: E402  (attrs only: no torch in the watching process)
import source_tree  # noqa: E402

RESULTS, REPORT, LOG = "results.json", "results.md", "log.txt"


# -- results ------------------------------------------------------------------------------------------------------


def load(out: Path) -> dict[str, Any]:
    path = out / RESULTS
    return json.loads(path.read_text()) if path.exists() else {"meta": {}, "sections": {}}


def save(out: Path, results: dict[str, Any]) -> None:
    """results.json and results.md, each written whole then renamed (a reader never sees half a file)."""
    results["targets"] = targets(results)
    for name, text in ((RESULTS, json.dumps(results, indent=1, default=str)), (REPORT, markdown(results))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)


def write_state(path: Path, state: dict[str, Any]) -> None:
    """The worker's current section for the watcher, written whole then renamed: the watcher polls the file twice a
    second and must never read it half written."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    """The worker's current section, or None (no section running, or a file not readable as a whole)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cell(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str("" if value is None else value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def _rows_at(results: dict[str, Any], section: str, key: str, size: int | None = None) -> list[dict[str, Any]]:
    rows = results["sections"].get(section, {}).get("rows", [])
    if size is None and rows:
        size = 50 if any(r.get(key) == 50 for r in rows) else max(r.get(key, 0) for r in rows)
    return [r for r in rows if r.get(key) == size]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 23's targets against what this run measured (``met`` is None where nothing was measured)."""
    out = []
    cifar = _rows_at(results, "cifar10_cohort", "clients")
    row = cifar[0] if cifar else {}
    ratio = row.get("vectorised / per-job")
    out.append({"target": "vectorised >= 15x per-job, pfl's CIFAR-10 cohort", "clients": row.get("clients"),
                "measured": f"{ratio}x (min of pairs; median {row.get('ratio median')}x)" if ratio else "not measured",
                "met": None if ratio is None else ratio >= 15})
    pfl = row.get("vectorised / pfl")
    out.append({"target": "vectorised >= 5x pfl on the same device", "clients": row.get("clients"),
                "measured": f"{pfl}x" if pfl else (row.get("pfl s/round") or "not measured"),
                "met": None if not pfl else pfl >= 5})
    for r in _rows_at(results, "frozen_cohorts", "clients"):
        out.append({"target": f"{r['method']}: vectorised >= 10x one-by-one", "clients": r["clients"],
                    "measured": f"{r['ratio']}x (min of pairs; median {r.get('ratio median')}x)",
                    "met": r["ratio"] >= 10})
    rec = results["sections"].get("recipes", {})
    if "counts" in rec:
        c = rec["counts"]
        out.append({"target": "every recipe x precision finishes without NaN, or is refused in one line",
                    "clients": None, "measured": f"{c['works']} work, {c['refused']} refused, {c['broken']} broken",
                    "met": c["broken"] == 0})
    res = results["sections"].get("resume", {})
    if res.get("rows"):
        out.append({"target": "resume across devices: identical, or within the documented tolerance",
                    "clients": None, "measured": "; ".join(f"{r['precision']}: loss gap {r['max_loss_gap']}, "
                                                          f"accuracy gap {r['max_accuracy_gap']}" for r in res["rows"]),
                    "met": all(r["within"] for r in res["rows"])})
    tests = results["sections"].get("pytest_gpu", {})
    if "summary" in tests:
        out.append({"target": "pytest -m gpu passes", "clients": None, "measured": tests["summary"],
                    "met": tests.get("returncode") == 0})
    return out


def markdown(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    env = results["sections"].get("environment", {}).get("info", {})
    where = env.get("gpu") or meta.get("device", "?")
    lines = [f"# GPU evidence: {where}", "",
             f"torch {env.get('torch', '?')} (CUDA {env.get('cuda')}), Python {env.get('python', '?')}, "
             f"device `{meta.get('device')}`{' (quick: tiny scale)' if meta.get('quick') else ''}; "
             f"started {meta.get('started', '?')}, {meta.get('wall_s', '?')} s so far; "
             f"command: `{meta.get('command')}`",
             ""]
    if meta.get("device") == "cpu":
        lines += ["**CPU rehearsal**: the figures below are not the targets' device; they show the script works.", ""]
    lines += ["## Targets", "", table([{**t, "met": {True: "yes", False: "**no**", None: "-"}[t["met"]]}
                                       for t in results.get("targets", [])]), ""]
    for name, sec in results["sections"].items():
        lines += [f"## {name}: {sec.get('status')} ({sec.get('seconds', '?')} s)", ""]
        if sec.get("error"):
            lines += ["```", sec["error"], *sec.get("traceback", [])[-12:], "```", ""]
        if sec.get("rows"):
            lines += [table(sec["rows"]), ""]
        if sec.get("python"):
            lines += ["Python functions (cProfile, one steady round):", "", table(sec["python"]), ""]
        for key, value in sec.items():
            if key.endswith("profiled round s"):
                lines += [f"{key}: {value}", ""]
            elif key.endswith("traceback callers") and "<-" in str(value):
                lines += [f"{key}:", "", "```", str(value).strip(), "```", ""]
        if sec.get("agreement"):
            lines += ["Per-client agreement of the first round "
                      "(||delta_vectorised - delta_per-job|| / ||delta_per-job||):",
                      "", table(sec["agreement"]), ""]
    return "\n".join(lines)


# -- the worker ---------------------------------------------------------------------------------------------------


def install_wheels(wheels: Path, tmp: Path) -> tuple[str | None, str | None]:
    """Install the carried wheels into two folders (pfl's apart: its pins must not shadow the device's packages)."""
    found: list[str | None] = []
    for sub, name in ((wheels, "site"), (wheels / "pfl", "pfl-site")):
        files = sorted(str(p) for p in sub.glob("*.whl"))
        if not files:
            found.append(None)
            continue
        target = tmp / name
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--upgrade", "--target", str(target), *files],
                              capture_output=True, text=True)
        if done.returncode != 0:  # said, and the run goes on: the sections that need them will fail and say why
            print(f"[gpu-evidence] installing {sub}/*.whl failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}",
                  flush=True)
            found.append(None)
            continue
        found.append(str(target))
    return found[0], found[1]


def worker(args: argparse.Namespace) -> None:
    import torch

    out, state = Path(args.out), Path(args.state)
    setup = gpu_sections.Setup(device=args.device, quick=args.quick, tmp=Path(args.tmp), out=out, threads=args.threads,
                               pfl_site=args.pfl_site)
    for name in args.sections.split(","):
        fn, full, quick = gpu_sections.SECTIONS[name]
        need = quick if args.quick else full
        left = args.deadline - time.time()
        results = load(out)
        if left < need:
            results["sections"][name] = {"status": "skipped", "seconds": 0, "error": f"skipped: {left:.0f} s of the "
                                         f"budget left, the section takes about {need:.0f} s (--budget)"}
            save(out, results)
            print(f"[gpu-evidence] {name}: skipped ({left:.0f} s left, needs ~{need:.0f} s)", flush=True)
            continue
        write_state(state, {"section": name, "start": time.time(), "expected": need})
        print(f"[gpu-evidence] {name}: start ({left:.0f} s of the budget left)", flush=True)
        start = time.perf_counter()
        try:
            section = fn(setup)
        except Exception as exc:  # noqa: BLE001 - a section's failure is recorded; the next one runs
            section = {"status": "error", "error": gpu_sections.one_line(exc),
                       "traceback": traceback.format_exc().strip().splitlines()[-24:]}
        section["seconds"] = round(time.perf_counter() - start, 1)
        results = load(out)
        results["sections"][name] = section
        results["meta"]["wall_s"] = round(time.time() - results["meta"].get("t0", time.time()), 1)
        save(out, results)
        print(f"[gpu-evidence] {name}: {section['status']} in {section['seconds']} s"
              + (f" ({section['error']})" if section.get("error") else ""), flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    state.unlink(missing_ok=True)


# -- the watcher --------------------------------------------------------------------------------------------------


def _pump(stream: Any, log: Any) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()


def watch(args: argparse.Namespace) -> int:
    t0 = time.time()
    deadline = t0 + args.budget
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpu-evidence-"))
    site = pfl_site = None
    if args.wheels:
        site, pfl_site = install_wheels(Path(args.wheels), tmp)
        if site:
            os.environ["PYTHONPATH"] = os.pathsep.join([site] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    paths = source_tree.activate(into=tmp / "source-tree")
    wanted = [s for s in gpu_sections.SECTIONS if (not args.only or s in args.only) and s not in args.skip]
    results: dict[str, Any] = {"meta": {"device": args.device, "quick": args.quick, "budget_s": args.budget, "t0": t0,
                        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                        "command": " ".join([Path(sys.executable).name, *sys.argv]), "wheels": site,
                        "pfl_site": pfl_site, "source_tree": bool(paths)}, "sections": {}}
    save(out, results)
    state = tmp / "state.json"
    remaining = list(wanted)
    with open(out / LOG, "a") as log:
        while remaining:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--sections", ",".join(remaining),
                   "--deadline", str(deadline), "--state", str(state), "--tmp", str(tmp), "--out", str(out),
                   "--device", args.device, "--threads", str(args.threads)] + (["--quick"] if args.quick else []) + (
                   ["--pfl-site", pfl_site] if pfl_site else [])
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            pump = threading.Thread(target=_pump, args=(child.stdout, log), daemon=True)
            pump.start()
            killed = None
            try:
                while child.poll() is None:
                    time.sleep(0.5)
                    now = time.time()
                    current = read_state(state)
                    if current and now - current["start"] > max(3 * current["expected"], 60):
                        killed = f"timed out: over {max(3 * current['expected'], 60):.0f} s (3x its expected time)"
                    elif now > deadline + args.grace:
                        killed = f"timed out: the budget (--budget {args.budget:.0f} s) ran out"
                    if killed:
                        os.killpg(child.pid, 9)
                        child.wait()
            finally:
                if child.poll() is None:  # the watcher itself failed: the worker (its own session) must not outlive it
                    os.killpg(child.pid, 9)
                    child.wait()
            pump.join(timeout=5)
            results = load(out)
            remaining = [s for s in remaining if s not in results["sections"]]
            current = read_state(state)
            state.unlink(missing_ok=True)
            if not remaining:
                break
            if current is None or current["section"] not in remaining:
                for name in remaining:  # the worker died outside any section: nothing more can be said
                    results["sections"][name] = {"status": "not run", "error": f"worker exited {child.returncode}"}
                break
            name = current["section"]
            results["sections"][name] = {"status": "timed out" if killed else "crashed",
                                         "seconds": round(time.time() - current["start"], 1),
                                         "error": killed or f"the worker process exited with {child.returncode}"}
            save(out, results)
            remaining.remove(name)
            if time.time() > deadline:
                for rest in remaining:
                    results["sections"][rest] = {"status": "skipped", "error": "skipped: the budget ran out"}
                break
    results["meta"]["wall_s"] = round(time.time() - t0, 1)
    save(out, results)
    print("\n" + table([{**t, "met": {True: "yes", False: "NO", None: "-"}[t["met"]]} for t in results["targets"]]))
    sections = results["sections"].items()
    print("\n" + "\n".join(f"{n}: {s.get('status')} ({s.get('seconds', '-')} s)" for n, s in sections))
    print(f"\n[gpu-evidence] wrote {out / RESULTS} and {out / REPORT} in {results['meta']['wall_s']} s")
    bad = [n for n, s in results["sections"].items() if s.get("status") not in ("ok", "skipped")]
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu for the rehearsal")
    ap.add_argument("--out", required=True, help="folder for results.json, results.md, log.txt, pytest-gpu.txt")
    ap.add_argument("--quick", action="store_true", help="every section at tiny scale (the CPU rehearsal)")
    ap.add_argument("--budget", type=float, default=450, help="seconds for the whole run; later sections are skipped")
    ap.add_argument("--grace", type=float, default=30, help="seconds past the budget before the worker is stopped")
    ap.add_argument("--wheels", help="folder of carried wheels (scripts/gpu-wheels): installed into a temp folder")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the timed sides (fedcore and pfl)")
    ap.add_argument("--only", nargs="*", default=[], choices=list(gpu_sections.SECTIONS), help="run only these")
    ap.add_argument("--skip", nargs="*", default=[], choices=list(gpu_sections.SECTIONS), help="leave these out")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sections", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--pfl-site", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    raise SystemExit(watch(args))


if __name__ == "__main__":
    main()
