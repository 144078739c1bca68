"""The sections of ``benchmarks/gpu_evidence.py``: each measures one claim and returns a plain dict.

A section gets a :class:`Setup` (device, precision support, scale) and returns ``{"status": ..., "rows": [...],
...}``: ``rows`` becomes the section's table in ``results.md``, every other key goes to ``results.json``.
``status`` is ``ok`` or ``failed`` (something measured went wrong); an exception is recorded by the runner. Every
run goes through fedcore's public routes: a config (``fedcore.experiment``) or ``Pipeline.from_config`` with
components named as in a TOML ``[pipeline]``, so a cohort that changes behind its name is measured as it is then.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import math
import os
from pathlib import Path
import statistics
import subprocess
import sys
import time
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RECIPES = ("splitfed-v1", "sa-fedlora", "promptfl", "co-s2p", "fedvkd", "tree-learning")
"""One recipe per substrate (split, LoRA, CLIP prompts, pruning, distillation, Tree Learning's split)."""
PRECISIONS = ("fp32", "bf16", "fp16")
RESUME_TOLERANCE = {"fp32": {"loss": 1e-3, "accuracy_samples": 2}, "bf16": {"loss": 2e-2, "accuracy_samples": 9}}
"""A run checkpointed on one device and resumed on another vs an uninterrupted run: largest allowed gap of any loss
column, and of any accuracy column in test samples (450 digits: 2 samples = 0.0044, 9 = 0.02). On one device the
histories must be identical."""


@attrs.frozen(kw_only=True)
class Setup:
    device: str
    quick: bool
    tmp: Path
    out: Path
    threads: int = 1
    pfl_site: str | None = None

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def finite_problem(rows: Sequence[Mapping[str, Any]], rounds: int) -> str | None:
    from fedcore.experiment.matrix import row_problem

    return row_problem(rows, rounds)


def final_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    keys = ("test_accuracy", "test_loss", "train_loss", "local_accuracy", "agg_tl_loss")
    return {k: round(float(row[k]), 5) for k in keys if isinstance(row.get(k), (int, float))}


def peak_reset(setup: Setup) -> None:
    if setup.cuda:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_mib(setup: Setup) -> float | None:
    if not setup.cuda:
        return None
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


# -- environment ------------------------------------------------------------------------------------------------


def environment(setup: Setup) -> dict[str, Any]:
    import platform

    import torch

    import fedcore

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda": torch.version.cuda, "fedcore": fedcore.__version__, "device": setup.device,
                            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if setup.cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                    multiprocessors=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1), cudnn=torch.backends.cudnn.version(),
                    tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32)
        a = torch.randn(4096, 4096, device=setup.device, dtype=torch.bfloat16)
        setup.sync()
        start = time.perf_counter()
        for _ in range(10):
            a @ a
        setup.sync()
        info["bf16_matmul_tflops"] = round(10 * 2 * 4096 ** 3 / (time.perf_counter() - start) / 1e12, 1)
    plugins = fedcore.plugins.list_plugins()
    broken = {p.name: (p.error or "").splitlines()[-1] for p in plugins if not p.ok}
    info["plugins"] = len(plugins)
    rows = [{"what": k, "value": v} for k, v in info.items()]
    rows += [{"what": f"plugin {name} FAILED", "value": err} for name, err in broken.items()]
    return {"status": "failed" if broken else "ok", "rows": rows, "info": info, "broken_plugins": broken}


# -- pytest -m gpu ----------------------------------------------------------------------------------------------


def gpu_test_files() -> list[str]:
    """Every test file that marks a test ``gpu`` (so pytest collects those files only)."""
    found = []
    for base in ("tests", "substrates", "plugins"):
        for path in sorted((ROOT / base).rglob("test_*.py")):
            if "mark.gpu" in path.read_text(errors="replace"):
                found.append(str(path.relative_to(ROOT)))
    return found


def pytest_gpu(setup: Setup, timeout: float = 200) -> dict[str, Any]:
    """``pytest -m gpu``; on the CPU (the rehearsal) with ``FEDCORE_GPU_TEST_DEVICE=cpu``, so the tests that can
    run without CUDA (``tests/test_gpu_runs.py``) run their code paths on the CPU instead of skipping."""
    files = gpu_test_files()
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "--durations=10", "-p", "no:cacheprovider",
           *files]
    env = dict(os.environ, **({} if setup.cuda else {"FEDCORE_GPU_TEST_DEVICE": "cpu"}))
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # its output is bytes even with text=True
        got = "".join(b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
                      for b in (exc.stdout, exc.stderr))
        text, code = f"{got}\n[timed out after {timeout:.0f} s]", -1
    (setup.out / "pytest-gpu.txt").write_text(" ".join(cmd) + "\n\n" + text)
    summary = next((line.strip("= ") for line in reversed(text.splitlines()) if " in " in line and "=" in line),
                   text.strip().splitlines()[-1] if text.strip() else "")
    return {"status": "ok" if code == 0 else "failed", "returncode": code, "files": files, "summary": summary,
            "rows": [{"files": ", ".join(files), "result": summary, "exit": code}]}


# -- configs: the example and the recipes ------------------------------------------------------------------------


def run_config(config: Mapping[str, Any], setup: Setup) -> dict[str, Any]:
    """Plan, build and run one config; ``status`` works / refused (one line at planning) / broken."""
    from fedcore.errors import ConfigError
    from fedcore.experiment.build import materialize, plan
    from fedcore.experiment.config import load_config

    start = time.perf_counter()
    try:
        checked = plan(load_config(None, base=dict(config)))
    except ConfigError as exc:
        return {"status": "refused", "detail": str(exc).strip().splitlines()[0], "seconds": 0.0}
    peak_reset(setup)
    try:
        m = materialize(checked)
        result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
        rows = [dict(r) for r in result.history.rows]
    except Exception as exc:  # noqa: BLE001 - any crash is the cell's outcome
        return {"status": "broken", "detail": one_line(exc), "seconds": round(time.perf_counter() - start, 2)}
    setup.sync()
    seconds = round(time.perf_counter() - start, 2)
    problem = finite_problem(rows, int(checked.config["rounds"]))
    return {"status": "broken" if problem else "works", "detail": problem or "", "seconds": seconds,
            "metrics": final_metrics(rows[-1]) if rows else {}, "peak_mib": peak_mib(setup), "rows": rows}


def example(setup: Setup) -> dict[str, Any]:
    """``examples/fedavg_dirichlet.toml`` on the device through ``fedcore.experiment`` (a run directory)."""
    from fedcore.experiment import prepare, run_experiment

    sets = ["rounds=3"] if setup.quick else []
    rows: list[dict[str, Any]] = []
    for device in dict.fromkeys([setup.device, "cpu"]):  # the CPU run is the reference for the device's
        start = time.perf_counter()
        m = prepare(ROOT / "examples" / "fedavg_dirichlet.toml", [*sets, f'device="{device}"'])
        outcome = run_experiment(m, out=setup.tmp / f"example-{device.replace(':', '')}", progress="none")
        last = outcome.rows[-1]
        rows.append({"device": device, "state": outcome.state, "rounds": len(outcome.rows),
                     "seconds": round(time.perf_counter() - start, 2), **final_metrics(last)})
    ok = all(r["state"] == "finished" and math.isfinite(r.get("test_loss", math.nan)) for r in rows)
    gap = abs(rows[0].get("test_accuracy", 0) - rows[-1].get("test_accuracy", 0))
    return {"status": "ok" if ok else "failed", "rows": rows, "accuracy_gap_vs_cpu": round(gap, 5)}


def recipe_config(recipe: str, setup: Setup, precision: str, rounds: int = 2) -> dict[str, Any]:
    from fedcore.experiment.matrix import cell_config

    cfg = cell_config(recipe, "uniform", rounds=rounds)
    cfg.update(device=setup.device, precision=precision, name=f"gpu-{recipe}-{precision}")
    return cfg


def recipes(setup: Setup) -> dict[str, Any]:
    """One recipe per substrate, two rounds, in fp32, bf16 and fp16: final metrics, NaN checks, or the refusal."""
    rows = []
    for recipe in RECIPES:
        for precision in PRECISIONS:
            cell = run_config(recipe_config(recipe, setup, precision), setup)
            rows.append({"recipe": recipe, "precision": precision, "status": cell["status"],
                         "detail": cell["detail"], "seconds": cell["seconds"], "peak_mib": cell.get("peak_mib"),
                         **cell.get("metrics", {})})
            print(f"  {recipe:14s} {precision}: {cell['status']} {cell['detail']} {cell.get('metrics', '')}",
                  flush=True)
    broken = [r for r in rows if r["status"] == "broken"]
    return {"status": "failed" if broken else "ok", "rows": rows,
            "counts": {s: sum(r["status"] == s for r in rows) for s in ("works", "refused", "broken")}}


def recipe_sweep(setup: Setup) -> dict[str, Any]:
    """Every installed recipe for two rounds in fp32 on the device (the recipe matrix's micro setups)."""
    from fedcore.experiment.matrix import installed_recipes

    names = installed_recipes()
    if setup.quick:
        names = [n for n in names if n in ("fedavg", "fedper", "cafpt")]
    rows = []
    for recipe in names:
        cell = run_config(recipe_config(recipe, setup, "fp32"), setup)
        rows.append({"recipe": recipe, "status": cell["status"], "detail": cell["detail"], "seconds": cell["seconds"],
                     **cell.get("metrics", {})})
    broken = [r["recipe"] for r in rows if r["status"] == "broken"]
    return {"status": "failed" if broken else "ok", "rows": rows, "broken": broken}


# -- resume across devices ---------------------------------------------------------------------------------------


class Stop(Exception):
    """Raised from ``on_round`` to interrupt a run after a round (its checkpoint is written)."""


def _stop_after(round_index: int) -> Callable[[dict[str, Any]], None]:
    def on_round(row: dict[str, Any]) -> None:
        if row["round"] == round_index:
            raise Stop
    return on_round


def _gaps(full: Sequence[Mapping[str, Any]], resumed: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for a, b in zip(full, resumed):
        for k, v in a.items():
            if isinstance(v, float) and not k.endswith("wall_s") and isinstance(b.get(k), (int, float)):
                out[k] = max(out.get(k, 0.0), abs(v - float(b[k])))
    return out


def resume(setup: Setup) -> dict[str, Any]:
    """A run checkpointed on the device, resumed on the CPU, then back on the device, vs an uninterrupted run."""
    from fedcore.experiment import prepare, run_experiment

    config = ROOT / "examples" / "fedavg_dirichlet.toml"
    rounds = 3 if setup.quick else 4
    rows = []
    precisions = ["fp32", "bf16"]
    for precision in precisions:
        sets = [f"rounds={rounds}", f'precision="{precision}"', "checkpoint.every=1"]
        full = run_experiment(prepare(config, [*sets, f'device="{setup.device}"']),
                              out=setup.tmp / f"resume-full-{precision}", progress="none").rows
        path = setup.tmp / f"resume-{precision}"
        legs = [(setup.device, 0), ("cpu", 1), (setup.device, None)]
        for i, (device, stop) in enumerate(legs):
            m = prepare(config, [*sets, f'device="{device}"'])
            try:
                outcome = run_experiment(m, out=path if i == 0 else None, resume=path if i else None,
                                         progress="none", on_round=_stop_after(stop) if stop is not None else None)
            except Stop:
                continue
        resumed = outcome.rows
        gaps = _gaps(full, resumed)
        same_device = not setup.cuda
        tol = RESUME_TOLERANCE[precision]
        test_n = 450
        worst_loss = max((v for k, v in gaps.items() if "loss" in k), default=0.0)
        worst_acc = max((v for k, v in gaps.items() if "accuracy" in k), default=0.0)
        within = (not any(gaps.values())) if same_device else (
            worst_loss <= tol["loss"] and worst_acc <= tol["accuracy_samples"] / test_n + 1e-9)
        rows.append({"precision": precision, "legs": " -> ".join(f"{d} (to round {s if s is not None else rounds - 1})"
                                                                   for d, s in legs),
                     "rounds": len(resumed), "identical": not any(gaps.values()),
                     "max_loss_gap": f"{worst_loss:.2e}", "max_accuracy_gap": f"{worst_acc:.4f}",
                     "tolerance": "identical" if same_device else f"loss {tol['loss']}, accuracy "
                                                                  f"{tol['accuracy_samples']} samples",
                     "within": within and len(resumed) == rounds})
    return {"status": "ok" if all(r["within"] for r in rows) else "failed", "rows": rows}


# -- the vectorised cohort on pfl's CIFAR-10 job -------------------------------------------------------------------


def first_round_updates() -> Any:
    """An observer keeping each client's trained-minus-received tensors of round 0, flattened, on their device."""
    import torch

    import fedcore

    @attrs.frozen(eq=False, kw_only=True)
    class FirstRoundUpdates:
        deltas: dict[int, torch.Tensor] = attrs.field(factory=dict)

        @fedcore.hookimpl
        def fedcore_client_done(self, client: Any, update: Any, ctx: Any) -> None:
            if ctx.round == 0:
                self.deltas[client.id] = torch.cat([(update.tensors[k].detach().float() - update.base[k].float())
                                                    .flatten() for k in sorted(update.tensors) if k in update.base])

    return FirstRoundUpdates()


def agreement(a: Any, b: Any) -> dict[str, Any]:
    """Per client: ||delta_a - delta_b|| / ||delta_a||; the largest and the median over the clients."""
    rel = []
    for cid, da in a.deltas.items():
        db = b.deltas.get(cid)
        if db is None:
            continue
        rel.append(float((da - db).norm() / max(float(da.norm()), 1e-30)))
    if not rel:
        return {"clients": 0}
    return {"clients": len(rel), "max_rel": f"{max(rel):.2e}", "median_rel": f"{statistics.median(rel):.2e}"}


def wave_timer(setup: Setup) -> Any:
    """A wrapper of the cohort slot: wall seconds of each dispatch wave's training (device work waited for), so a
    round's time splits into training and the engine's per-client work around it (shares, ledger, aggregation)."""
    import fedcore

    @attrs.frozen(eq=False, kw_only=True)
    class WaveTimer:
        seconds: list[float] = attrs.field(factory=list)

        @fedcore.hookimpl(wrapper=True)
        def fedcore_train_cohort(self, jobs: Any, ctx: Any) -> Any:
            setup.sync()
            start = time.perf_counter()
            out = yield
            setup.sync()
            self.seconds.append(time.perf_counter() - start)
            return out

    return WaveTimer()


def cifar_data(setup: Setup, users: int, per_user: int) -> Any:
    import numpy as np
    import torch

    from fedcore.data import ArrayDataset

    rng = np.random.default_rng(0)
    n = users * per_user
    return ArrayDataset(torch.from_numpy(rng.standard_normal((n, 3, 32, 32), dtype=np.float32)),
                        torch.from_numpy(rng.integers(0, 10, n)))


def cifar_model(dropout: bool = True) -> Any:
    import torch

    sys.path.insert(0, str(HERE))
    from pfl_cifar10 import simple_cnn

    torch.manual_seed(0)
    model: Any = simple_cnn()
    if not dropout:
        for i, layer in enumerate(list(model)):
            if isinstance(layer, torch.nn.Dropout):
                model[i] = torch.nn.Identity()
    return model


def vectorised_spec(setup: Setup, name: str = "vectorised") -> dict[str, Any]:
    """The cohort as a config names it; on the CPU rehearsal forced on (the CPU rule keeps this CNN one by one)."""
    return {"name": name} if setup.device != "cpu" else {"name": name, "on_cpu": "vectorise"}


def cifar_rounds(setup: Setup, data: Any, cohort: Any, clients: int, users: int, rounds: int,
                 observers: Sequence[Any] = (), dropout: bool = True) -> tuple[list[float], list[float]]:
    """Seconds of each round of pfl's job (``clients`` of ``users`` per round, batch 10, one epoch of SGD(0.05)),
    and of each round's training wave."""
    import fedcore

    timer = wave_timer(setup)
    pipe = fedcore.Pipeline.from_config({
        "partition": "iid", "schedule": {"name": "uniform", "fraction": clients / users},
        "local_update": {"name": "sgd", "lr": 0.05, "batch_size": 10, "epochs": 1}, "cohort": cohort,
        "plugins": [*observers, timer]})
    stamps: list[float] = []

    def stamp(row: dict[str, Any]) -> None:
        setup.sync()
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    pipe.run(model=cifar_model(dropout), train=data, num_clients=users, rounds=rounds, seed=0, on_round=stamp,
             device=setup.device)
    return [b - a for a, b in zip([start, *stamps], stamps)], list(timer.seconds)


def steady(rounds: Sequence[float]) -> float:
    return statistics.mean(rounds[1:]) if len(rounds) > 1 else rounds[0]


def pfl_rounds(setup: Setup, users: int, per_user: int, clients: int, rounds: int) -> list[float] | str:
    if not setup.pfl_site:
        return "not run: pfl's wheels were not carried (scripts/gpu-wheels, then --wheels .whl)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([setup.pfl_site, os.environ.get("PYTHONPATH", "")]),
               PFL_PYTORCH_DEVICE=setup.device)
    cmd = [sys.executable, str(HERE / "pfl_cifar10.py"), "--users", str(users), "--per-user", str(per_user),
           "--clients", str(clients), "--rounds", str(rounds), "--threads", str(setup.threads)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    except subprocess.TimeoutExpired:
        return "failed: timed out after 240 s"
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:300]
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])["round_s"]


def first_round_agreement(setup: Setup, data: Any, clients: int, users: int, dropout: bool) -> dict[str, Any]:
    """Round 0 of pfl's job trained ``per-job`` and ``vectorised``: each client's update compared (``agreement``)."""
    seen = {}
    for name in ("per-job", "vectorised"):
        rec = first_round_updates()
        spec = {"name": "per-job"} if name == "per-job" else vectorised_spec(setup)
        cifar_rounds(setup, data, spec, clients, users, 1, observers=[rec], dropout=dropout)
        seen[name] = rec
    return agreement(seen["per-job"], seen["vectorised"])


def cifar10_cohort(setup: Setup) -> dict[str, Any]:
    """``per-job`` vs ``vectorised`` (and pfl) on pfl's CIFAR-10 job: clients/s, ratios, per-client agreement."""
    import torch

    torch.set_num_threads(setup.threads)
    users, per_user, sizes, rounds = (60, 20, [8, 16], 2) if setup.quick else (1000, 50, [50, 200], 3)
    data = cifar_data(setup, users, per_user)
    rows, agree = [], []
    for clients in sizes:
        times: dict[str, list[float]] = {"per-job": [], "vectorised": []}
        waves: dict[str, list[float]] = {"per-job": [], "vectorised": []}
        for name in ("per-job", "vectorised", "vectorised", "per-job"):  # interleaved: A B B A
            spec = {"name": "per-job"} if name == "per-job" else vectorised_spec(setup)
            round_s, wave_s = cifar_rounds(setup, data, spec, clients, users, rounds)
            times[name].append(steady(round_s))
            waves[name].append(steady(wave_s))
        one, vec = statistics.median(times["per-job"]), statistics.median(times["vectorised"])
        one_w, vec_w = statistics.median(waves["per-job"]), statistics.median(waves["vectorised"])
        ratios = [a / b for a, b in zip(times["per-job"], reversed(times["vectorised"]))]
        pfl = pfl_rounds(setup, users, per_user, clients, rounds)
        pfl_s = steady(pfl) if isinstance(pfl, list) else None
        rows.append({"clients": clients, "per-job s/round": round(one, 4), "vectorised s/round": round(vec, 4),
                     "per-job clients/s": round(clients / one, 1), "vectorised clients/s": round(clients / vec, 1),
                     "vectorised / per-job": round(min(ratios), 2), "ratio median": round(statistics.median(ratios), 2),
                     "training only: per-job s": round(one_w, 4), "vectorised s": round(vec_w, 4),
                     "training ratio": round(one_w / vec_w, 2),
                     "pfl s/round": round(pfl_s, 4) if pfl_s else pfl,
                     "pfl clients/s": round(clients / pfl_s, 1) if pfl_s else None,
                     "vectorised / pfl": round(pfl_s / vec, 2) if pfl_s else None})
        print(f"  {clients} clients: {rows[-1]}", flush=True)
    for dropout in (True, False):
        agree.append({"model": "pfl simple_cnn" + ("" if dropout else " without dropout"), "clients": sizes[0],
                      **first_round_agreement(setup, data, sizes[0], users, dropout)})
    return {"status": "ok", "rows": rows, "agreement": agree, "users": users, "per_user": per_user,
            "steady_rounds": rounds - 1}


def round_profiler(setup: Setup, round_index: int) -> Any:
    """An observer that runs the torch profiler and cProfile over round ``round_index`` alone (a steady round: the
    dataset placed, cuDNN's algorithms chosen)."""
    import cProfile

    from torch.profiler import ProfilerActivity, profile

    import fedcore

    @attrs.frozen(eq=False, kw_only=True)
    class RoundProfiler:
        torch_profile: Any = attrs.field(factory=lambda: profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if setup.cuda else [])))
        python: cProfile.Profile = attrs.field(factory=cProfile.Profile)
        seconds: list[float] = attrs.field(factory=list)

        @fedcore.hookimpl
        def fedcore_round_start(self, ctx: Any) -> None:
            if ctx.round == round_index:
                setup.sync()
                self.seconds.append(time.perf_counter())
                self.torch_profile.__enter__()
                self.python.enable()

        @fedcore.hookimpl
        def fedcore_round_end(self, record: Any) -> None:
            if len(self.seconds) == 1:
                self.python.disable()
                setup.sync()
                self.torch_profile.__exit__(None, None, None)
                self.seconds.append(time.perf_counter())

    return RoundProfiler()


def vectorised_profile(setup: Setup) -> dict[str, Any]:
    """Where a steady ``vectorised`` round of pfl's CIFAR-10 job spends its time (50 clients): the torch profiler's
    heaviest operators (self CPU and self device time) and cProfile's heaviest Python functions, over the second
    round alone; and the per-client agreement with per-job with TF32 convolutions on (PyTorch's default) and off,
    without dropout, to tell the arithmetic's share of a disagreement from the program's."""
    import io
    import pstats

    import torch

    torch.set_num_threads(setup.threads)
    users, per_user, clients = (60, 20, 8) if setup.quick else (1000, 50, 50)
    data = cifar_data(setup, users, per_user)
    agree = []
    before = torch.backends.cudnn.allow_tf32
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        agree.append({"model": f"pfl simple_cnn without dropout, TF32 convolutions {'on' if tf32 else 'off'}",
                      "clients": clients, **first_round_agreement(setup, data, clients, users, dropout=False)})
    torch.backends.cudnn.allow_tf32 = before
    out: dict[str, Any] = {"status": "ok", "agreement": agree, "rows": [], "python": []}
    for name in ("vectorised", "per-job"):
        spy = round_profiler(setup, 1)
        spec = {"name": "per-job"} if name == "per-job" else vectorised_spec(setup)
        cifar_rounds(setup, data, spec, clients, users, 2, observers=[spy])
        events = spy.torch_profile.key_averages()
        device_key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") \
            else "self_cuda_time_total"
        for key in ("self_cpu_time_total", device_key) if setup.cuda else ("self_cpu_time_total",):
            for e in sorted(events, key=lambda e: -getattr(e, key))[:12]:
                out["rows"].append({"cohort": name, "sorted by": key, "op": e.key[:60], "calls": e.count,
                                    "self cpu ms": round(e.self_cpu_time_total / 1e3, 2),
                                    "self device ms": round(getattr(e, device_key, 0.0) / 1e3, 2)})
        stats = pstats.Stats(spy.python)
        items = list(stats.stats.items())  # type: ignore[attr-defined]
        own = sorted(items, key=lambda kv: -kv[1][2])[:20]
        ours = sorted([kv for kv in items if "/fedcore" in kv[0][0]], key=lambda kv: -kv[1][3])[:15]
        for sort, chosen in (("own time", own), ("fedcore's, by total time", ours)):
            for (file, line, func), (_, calls, tottime, cumtime, _) in chosen:
                out["python"].append({"cohort": name, "sorted by": sort,
                                      "function": f"{Path(file).name}:{line} {func}"[:70], "calls": calls,
                                      "tottime s": round(tottime, 4), "cumtime s": round(cumtime, 4)})
        text = io.StringIO()
        pstats.Stats(spy.python, stream=text).sort_stats("tottime").print_callers("format_exc|extract_stack|"
                                                                                  "format_frame_summary", 3)
        out[f"{name} traceback callers"] = text.getvalue()[-3000:]
        out[f"{name} profiled round s"] = round(spy.seconds[1] - spy.seconds[0], 4)
    return out


# -- frozen-backbone cohorts -------------------------------------------------------------------------------------


def _timed_round(setup: Setup, pipe: Any, **run: Any) -> tuple[float, float]:
    """The steady round's seconds and its training wave's (the pipeline with a :func:`wave_timer` added)."""
    import fedcore

    stamps: list[float] = []
    timer = wave_timer(setup)

    def stamp(row: dict[str, Any]) -> None:
        setup.sync()
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    fedcore.Pipeline([*pipe.components, timer]).run(on_round=stamp, device=setup.device, **run)
    return steady([b - a for a, b in zip([start, *stamps], stamps)]), steady(timer.seconds)


def promptfl_round(setup: Setup, clients: int, cohort: Any, rounds: int) -> tuple[float, float]:
    import fedcore
    from fedcore_clip import prompted_clip
    from fedcore_clip.testing import shapes_data, tiny_backbone

    train, test = shapes_data(2 * clients, 1, 6, stream="bench")
    pipe = fedcore.recipe("promptfl", cohort=cohort, partition={"shots": 2, "mode": "random_classes"},
                          local_update={"lr": 0.05, "epochs": 2, "batch_size": 2})
    model = prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=0)
    return _timed_round(setup, pipe, model=model, train=train, test=test, num_clients=clients, rounds=rounds, seed=0,
                        eval_every=10 ** 6)


def fedlora_round(setup: Setup, clients: int, cohort: Any, rounds: int) -> tuple[float, float]:
    import torch

    import fedcore
    from fedcore.data import load_digits
    from fedcore.models import micro_vit

    train, _ = load_digits()
    torch.manual_seed(0)
    model = micro_vit(num_classes=10, embed_dim=32, depth=2, num_heads=2)
    pipe = fedcore.recipe("fedlora", cohort=cohort, partition={"name": "iid"},
                          local_update={"e2_local_epochs": 1, "batch_size": 10})
    return _timed_round(setup, pipe, model=model, train=train.subset(range(20 * clients)), test=None,
                        num_clients=clients, rounds=rounds, seed=0, eval_every=10 ** 6)


def frozen_cohorts(setup: Setup) -> dict[str, Any]:
    """PromptFL (``vectorised-prompt``) and SA-FedLoRA's LoRA stage (``vectorised``) vs ``per-job`` at 10 and 50."""
    import torch

    torch.set_num_threads(setup.threads)
    sizes, rounds = ([4, 8], 2) if setup.quick else ([10, 50], 3)
    cases = [("PromptFL", promptfl_round, {"name": "vectorised-prompt"}),
             ("SA-FedLoRA (LoRA stage)", fedlora_round, vectorised_spec(setup))]
    rows = []
    for label, fn, spec in cases:
        for clients in sizes:
            runs = [fn(setup, clients, "per-job" if k in (0, 3) else spec, rounds) for k in range(4)]  # A B B A
            (one, one_w), (vec, vec_w) = runs[0], runs[1]
            ratios = [runs[0][0] / runs[1][0], runs[3][0] / runs[2][0]]
            one, vec = statistics.median([runs[0][0], runs[3][0]]), statistics.median([runs[1][0], runs[2][0]])
            one_w = statistics.median([runs[0][1], runs[3][1]])
            vec_w = statistics.median([runs[1][1], runs[2][1]])
            rows.append({"method": label, "clients": clients, "per-job clients/s": round(clients / one, 1),
                         "vectorised clients/s": round(clients / vec, 1), "ratio": round(min(ratios), 2),
                         "ratio median": round(statistics.median(ratios), 2),
                         "training only: per-job s": round(one_w, 4), "vectorised s": round(vec_w, 4),
                         "training ratio": round(one_w / vec_w, 2)})
            print(f"  {rows[-1]}", flush=True)
    return {"status": "ok", "rows": rows, "steady_rounds": rounds - 1}


# -- paper-scale smoke runs --------------------------------------------------------------------------------------


QUICK_PAPER = ("fedgkt_cifar10.toml", "fedv_cifar10.toml")


def paper_smoke(setup: Setup) -> dict[str, Any]:
    """``fedcore run CONFIG --smoke`` of every paper config: step time and peak memory vs the dry run's estimate."""
    from fedcore.experiment import load_config, plan, smoke

    paths = sorted((ROOT / "examples" / "paper").glob("*.toml"))
    if setup.quick:
        paths = [p for p in paths if p.name in QUICK_PAPER]
    batch = 2 if setup.quick else 32
    precision = "bf16" if setup.cuda else "fp32"
    rows = []
    for path in paths:
        start = time.perf_counter()
        try:
            out = smoke(plan(load_config(path)), device=setup.device, precision=precision, batch=batch,
                        classes=0 if setup.cuda else None, estimate=True)  # on the CPU too: the rehearsal runs it
        except Exception as exc:  # noqa: BLE001 - one config's failure is its row
            rows.append({"config": path.name, "ok": False, "problem": one_line(exc)})
            continue
        est = max(out.estimated_memory.values()) if out.estimated_memory else None
        rows.append({"config": path.name, "ok": out.ok, "problem": out.problem or "",
                     "params_M": round(out.params / 1e6, 1),
                     "precision": out.precision, "batch": out.batch, "build_s": round(out.build_s, 2),
                     "wave_s": ", ".join(f"{s:.3f}" for s in out.wave_s), "round_s": round(out.run_s, 2),
                     "peak_MiB": round(out.peak_memory / 2**20, 1) if out.peak_memory else None,
                     "estimate_MiB (fp32, per client)": round(est / 2**20, 1) if est else None,
                     "seconds": round(time.perf_counter() - start, 1)})
        print(f"  {rows[-1]}", flush=True)
    return {"status": "ok" if all(r["ok"] for r in rows) else "failed", "rows": rows}


SECTIONS: dict[str, tuple[Callable[[Setup], dict[str, Any]], float, float]] = {
    "environment": (environment, 10, 5),
    "cifar10_cohort": (cifar10_cohort, 100, 120),
    "frozen_cohorts": (frozen_cohorts, 45, 40),
    "vectorised_profile": (vectorised_profile, 30, 40),
    "recipes": (recipes, 60, 40),
    "resume": (resume, 30, 30),
    "pytest_gpu": (pytest_gpu, 75, 90),
    "example": (example, 25, 10),
    "paper_smoke": (paper_smoke, 90, 40),
    "recipe_sweep": (recipe_sweep, 60, 10),
}
"""name -> (function, expected seconds on one H100, expected seconds of the CPU rehearsal on the 2-core development
machine): the order they run in (the headline first, the issue's list before the wider sweep) and what the budget
check weighs; the watcher stops a section at 3x its expected time."""
