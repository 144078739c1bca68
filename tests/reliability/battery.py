"""What the battery's cases share: tiny configs per scheduler, reading a run directory, killing a real run, the
storage cases' reference run and crashed runs (built once per test process, copied per case)."""
from __future__ import annotations

from collections.abc import Callable
import json
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import textwrap
import time

SCHEDULES = {
    "sync": 'schedule = { name = "uniform", fraction = 0.75 }\naggregate = "fedavg"',
    "semi-async": 'schedule = { name = "semi-async", mu = 0.5, t_clk = 0.002 }\naggregate = "fedavg"',
    "buffered": 'schedule = { name = "buffered", buffer_size = 2, concurrency = 4 }\naggregate = "fedbuff"',
    "async": 'schedule = { name = "async", concurrency = 3 }\naggregate = { name = "fedasync", alpha = 0.6 }',
}


def config_text(schedule: str, *, rounds: int = 8, faults: str = "dropout_during = 0.2\nlost_upload = 0.1",
                name: str = "battery", epochs: int = 6, executor: str = '"inline"') -> str:
    """A small run on synthetic data with simulated devices, faults and a checkpoint every round."""
    return textwrap.dedent(f"""\
        name = "{name}"
        rounds = {rounds}
        num_clients = 6
        seed = 11
        dataset = {{ name = "synthetic", n = 480, n_test = 120, noise = 1.5 }}
        model = {{ name = "tiny-mlp", hidden = 32 }}
        executor = {executor}

        [pipeline]
        partition = {{ name = "dirichlet", alpha = 0.5, min_size = 20 }}
        local_update = {{ name = "sgd", lr = 0.05, momentum = 0.9, epochs = {epochs}, batch_size = 16 }}
        """) + SCHEDULES[schedule] + textwrap.dedent(f"""

        [clock]
        efficiency = 1.0

        [profiles]
        weights = {{ watch = 2, phone = 2, laptop = 2 }}

        [faults]
        {faults}

        [checkpoint]
        every = 1
        keep = 2
        """)


def rows_of(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "wall" not in k} for r in rows]


def status_of(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "status.json").read_text())


def kill_at(args: list[str], run_dir: Path, *, after_rows: int, delay: float, timeout: float = 300) -> int:
    """Start ``fedcore ARGS``, SIGKILL it ``delay`` seconds after ``run_dir`` has ``after_rows`` rows; rows then.

    Returns -1 when the run finished before the kill landed (the caller draws another moment); that includes a
    kill that lands after the run wrote ``state = finished`` but before its process exited.
    """
    cmd = [sys.executable, "-m", "fedcore.cli", *args, "--progress", "none"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while len(rows_of(run_dir)) < after_rows and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)
    if proc.poll() is not None:
        return -1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if status_of(run_dir).get("state") == "finished":
        return -1
    return len(rows_of(run_dir))


def start(args: list[str]) -> subprocess.Popen:
    """``fedcore ARGS`` in the background (stderr kept for the one-line checks)."""
    progress = ["--progress", "none"] if args[0] == "run" else []
    return subprocess.Popen([sys.executable, "-m", "fedcore.cli", *args, *progress],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_rows(run_dir: Path, n: int, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    """Until ``run_dir`` has ``n`` rows (or ``proc`` ended, or the timeout)."""
    deadline = time.monotonic() + timeout
    while len(rows_of(run_dir)) < n and (proc is None or proc.poll() is None) and time.monotonic() < deadline:
        time.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Crash(Exception):
    """Raised from a run's ``on_round``: the run stops in-process, as by a kill before its next checkpoint."""


def crashed_run(config: Path, run_dir: Path, round: int) -> Path:
    """Run ``config`` into ``run_dir`` (in-process), stopped right after ``round``'s row was written: ``run_dir``."""
    from fedcore.experiment.runner import prepare, run_experiment

    def crash(row: dict) -> None:
        if row["round"] == round:
            raise Crash

    try:
        run_experiment(prepare(config), out=run_dir, progress="none", on_round=crash)
    except Crash:
        return run_dir
    raise AssertionError(f"the run of {config} never reached round {round}")


_BUILT: dict[Path, object] = {}


def built_once(path: Path, build: Callable[[Path], object]) -> object:
    """``build(path)``'s result, built at the first call in this process and kept: the storage cases start from the
    same reference and crashed runs, which their damage and resume never touch (each case works on a copy)."""
    if path not in _BUILT:
        path.mkdir(parents=True)
        try:
            _BUILT[path] = build(path)
        except BaseException:  # the next case builds again (and fails with the same error, not a stale directory)
            shutil.rmtree(path, ignore_errors=True)
            raise
    return _BUILT[path]


def copy_of_run(source: Path, run_dir: Path) -> None:
    """A copy of a stopped run directory: it holds no absolute path, and its ``.lock`` file only names a pid (the
    lock itself is a ``flock`` on the open file, which a copy does not carry)."""
    shutil.copytree(source, run_dir)
