"""Running a sweep's cells: in this process, in parallel child processes, or as Ray tasks.

Every cell is a normal run directory, so a sweep resumes the way a run does: a finished cell is
skipped, a cell cut short (killed, failed) continues from its last good checkpoint with
``fedcore run --resume`` semantics, and a cell not started yet starts. Running the same sweep again
(or ``fedcore sweep --resume DIR``) therefore redoes nothing that finished.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
import os
from pathlib import Path
import shutil
import subprocess
import sys
import time
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.experiment.build import materialize, plan
from fedcore.experiment.config import validate
from fedcore.experiment.rundir import CONFIG, RunDir, holds_nothing, is_run_dir
from fedcore.experiment.runner import run_experiment
from fedcore.experiment.sweep_spec import SPEC, Cell, Sweep, load_sweep_spec, write_spec

LOGS = "logs"


@attrs.frozen(kw_only=True)
class CellResult:
    """What became of one cell in this invocation: ``finished``, ``skipped`` (finished before) or ``failed``."""

    setting: str
    seed: int
    run_dir: Path
    state: str
    seconds: float = 0.0
    error: str | None = None


@attrs.frozen(kw_only=True)
class SweepOutcome:
    """The sweep directory and every cell's result; :meth:`statistics` summarises it across seeds."""

    directory: Path
    cells: list[CellResult]

    @property
    def failed(self) -> list[CellResult]:
        return [c for c in self.cells if c.state == "failed"]

    def statistics(self, metric: str | None = None, baseline: str | None = None) -> Any:
        """The :class:`~fedcore.experiment.sweep_report.SweepStatistics` of this sweep's directory."""
        from fedcore.experiment.sweep_report import sweep_statistics

        return sweep_statistics(self.directory, metric=metric, baseline=baseline)


def cell_state(path: Path) -> str:
    """``new`` (nothing there), ``finished``, ``resume`` (a run cut short) or ``restart`` (cut before its config)."""
    if not path.exists() or holds_nothing(path):
        return "new"
    if not is_run_dir(path) or not (path / CONFIG).is_file():
        return "restart"
    return "finished" if RunDir(path).status().get("state") == "finished" else "resume"


def run_cell(directory: Path, cell: Cell) -> CellResult:
    """Run, resume or skip one cell in this process."""
    path = directory / cell.dirname
    state = cell_state(path)
    if state == "finished":
        return CellResult(setting=cell.setting.label, seed=cell.seed, run_dir=path, state="skipped")
    if state == "restart":  # killed between creating the directory and writing its config: nothing to keep
        shutil.rmtree(path)
    start = time.monotonic()
    m = materialize(plan(validate(cell.config, source=f"sweep cell {cell.dirname}")))
    try:
        outcome = run_experiment(m, out=path if state != "resume" else None, resume=path if state == "resume" else None,
                                 progress="none")
    except Exception as exc:  # one cell's failure is reported; the other cells still run
        return CellResult(setting=cell.setting.label, seed=cell.seed, run_dir=path, state="failed",
                          seconds=time.monotonic() - start, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    return CellResult(setting=cell.setting.label, seed=cell.seed, run_dir=path,
                      state="failed" if outcome.state == "failed" else "finished",
                      seconds=time.monotonic() - start, error=outcome.error)


def _cell_by_dir(directory: Path, dirname: str) -> Cell:
    spec = load_sweep_spec(directory / SPEC)
    for cell in spec.cells():
        if cell.dirname == dirname:
            return cell
    raise ConfigError(f"sweep {directory}: no cell {dirname!r}")


def _run_in_child(directory: Path, cell: Cell) -> CellResult:
    """The cell in a fresh Python process (``python -m fedcore.experiment.sweep_run DIR CELL``), its output logged."""
    path = directory / cell.dirname
    if cell_state(path) == "finished":
        return CellResult(setting=cell.setting.label, seed=cell.seed, run_dir=path, state="skipped")
    log = directory / LOGS / (cell.dirname.replace("/", "--") + ".log")
    log.parent.mkdir(exist_ok=True)
    start = time.monotonic()
    with open(log, "a") as f:
        code = subprocess.call([sys.executable, "-m", "fedcore.experiment.sweep_run", str(directory), cell.dirname,
                                str(os.getpid())], stdout=f, stderr=subprocess.STDOUT)
    status = RunDir(path).status()
    state = "finished" if code == 0 and status.get("state") == "finished" else "failed"
    error = None if state == "finished" else (status.get("error") or f"exit status {code}; see {log}")
    return CellResult(setting=cell.setting.label, seed=cell.seed, run_dir=path, state=state,
                      seconds=time.monotonic() - start, error=error)


def _ray_runner(address: str | None, jobs: int) -> Callable[[Path, Cell], CellResult]:
    import ray

    from fedcore.engine.ray_cluster import init_ray

    init_ray(address=address, num_cpus=jobs)  # loopback unless the user named a cluster's address
    remote = ray.remote(num_cpus=1)(run_cell)
    return lambda directory, cell: ray.get(remote.remote(directory, cell))


def run_sweep(config: str | Path | Sweep, *, grid: Sequence[str] = (), seeds: int | Sequence[int] | None = None,
              sets: Sequence[str] = (), out: str | Path | None = None, jobs: int = 1, ray: bool = False,
              ray_address: str | None = None, baseline: str | None = None,
              report: Callable[[str], None] | None = None, command: str | None = None) -> SweepOutcome:
    """Run every cell of a sweep into ``out`` (default ``runs/<name>-sweep``); cells already finished there
    are skipped, cells cut short resume. ``jobs`` > 1 runs cells in that many child processes at once; ``ray``
    runs them as Ray tasks. ``report`` gets one line per cell as it ends; ``command`` (the command line that
    started the sweep) is kept in ``sweep.json`` so a results table can say how it was made."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be >= 1")
    spec = config if isinstance(config, Sweep) else load_sweep_spec(config, sets=sets, grid=grid, seeds=seeds,
                                                                    baseline=baseline)
    cells = spec.cells()  # every cell checked before anything is written
    directory = Path(out) if out is not None else Path("runs") / f"{spec.name}-sweep"
    write_spec(directory, spec, cells, command)
    if ray:
        runner = _ray_runner(ray_address, jobs)
    else:
        runner = run_cell if jobs == 1 else _run_in_child
    results: list[CellResult] = []

    def one(cell: Cell) -> CellResult:
        result = runner(directory, cell)
        results.append(result)
        if report is not None:
            what = result.state + (f": {result.error}" if result.error else "")
            took = f" ({result.seconds:.1f} s)" if result.state != "skipped" else ""
            report(f"[{len(results)}/{len(cells)}] {cell.dirname}: {what}{took}")
        return result

    if jobs == 1 and not ray:
        ordered = [one(cell) for cell in cells]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            ordered = list(pool.map(one, cells))
    return SweepOutcome(directory=directory, cells=ordered)


def die_with_parent(parent: int) -> None:
    """End this cell (SIGTERM: ``interrupted``, resumable) when the sweep that started it dies, even by ``kill -9``:
    Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``), set here and checked against a parent that died
    before it was set. Elsewhere the cell outlives its sweep, and a resumed sweep meets its lock."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(f"fedcore sweep: the sweep (pid {parent}) ended before this cell started")


def _main(argv: Sequence[str]) -> int:
    """``python -m fedcore.experiment.sweep_run SWEEP_DIR CELL_DIR [PARENT_PID]``: one cell, for
    :func:`run_sweep`'s children."""
    directory, dirname = Path(argv[0]), argv[1]
    from fedcore.experiment.termination import terminate_as_interrupt

    terminate_as_interrupt()  # the parent-death signal (SIGTERM) leaves the cell interrupted, resumable
    if len(argv) > 2:
        die_with_parent(int(argv[2]))
    try:
        result = run_cell(directory, _cell_by_dir(directory, dirname))
    except KeyboardInterrupt:  # SIGTERM (the sweep died) or Ctrl-C: the cell says interrupted
        print(f"fedcore sweep: cell {dirname}: interrupted", file=sys.stderr)
        return 143
    if result.error:
        print(f"fedcore sweep: cell {dirname}: {result.error}", file=sys.stderr)
    return 0 if result.state in ("finished", "skipped") else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

__all__ = ["CellResult", "SweepOutcome", "cell_state", "run_cell", "run_sweep"]
