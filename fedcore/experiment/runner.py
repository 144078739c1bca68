"""Running an experiment from a config into a run directory, or resuming one.

Order matters: the config is checked and every name resolved, the dataset loaded and the model
built *before* the run directory is touched, so a bad config leaves nothing behind.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import contextlib
import copy
import datetime as _dt
import math
import os
from pathlib import Path
import shutil
import sys
from typing import Any

import attrs

from fedcore.engine.checkpoint import Checkpointer
from fedcore.engine.loop import Engine
from fedcore.engine.spec import RunSpec
from fedcore.errors import ConfigError
from fedcore.experiment.build import Materials, materialize, plan
from fedcore.experiment.config import load_config
from fedcore.experiment.progress import ProgressObserver, RunProgress, accuracy_key
from fedcore.experiment.rundir import (
    CONFIG,
    RunDir,
    RunStorageError,
    is_run_dir,
    storage_problem,
    version_changes,
    versions,
)
from fedcore.pipeline import Pipeline


def prepare(config_path: str | Path | None, sets: Sequence[str] = (), *, resume: str | Path | None = None) -> Materials:
    """Config (from the file, or the run directory's own when resuming without one) -> checked materials."""
    if config_path is None:
        if resume is None:
            raise ConfigError("give a CONFIG.toml to run (or --resume RUN_DIR)")
        config_path = Path(resume) / CONFIG
        if not Path(resume).is_dir():
            raise ConfigError(f"--resume {resume}: no such directory")
        if not config_path.is_file():
            raise ConfigError(f"--resume {resume}: not a fedcore run directory (no {CONFIG})")
    return materialize(plan(load_config(config_path, list(sets))))


def default_out(name: str, root: str | Path = "runs") -> Path:
    """``runs/<name>``, or ``runs/<name>-2``, ``-3``... when taken: a new run never lands on an old one."""
    base = Path(root) / name
    if not base.exists():
        return base
    n = 2
    while (Path(root) / f"{name}-{n}").exists():
        n += 1
    return Path(root) / f"{name}-{n}"


def manifest(m: Materials, pipeline: Pipeline, *, resumed_from: str | None = None) -> dict[str, Any]:
    """What ran: the pipeline, seed, data, versions. ``decided`` (added as rounds finish) holds the choices the run
    made at run time and repeats on resume (``RunContext.settings``: the vectorised cohort's ``on_cpu = "auto"``)."""
    return {
        "name": m.resolved["name"], "seed": m.resolved["seed"], "fingerprint": m.plan.fingerprint,
        "pipeline": pipeline.describe(), "dataset": m.resolved["dataset"], "model": m.resolved["model"],
        "model_parameters": sum(p.numel() for p in m.model.parameters()),
        "train_size": len(m.train), "test_size": None if m.test is None else len(m.test),
        "executor": m.resolved["executor"], "versions": versions(), "command": sys.argv,
        "written": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "resumed_from": resumed_from,
    }


class TensorBoardLog:
    """Numeric row values as scalars at step = rounds done; a resumed run purges steps after its checkpoint."""

    def __init__(self, path: Path, *, purge_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(path), purge_step=purge_step)

    def add(self, row: dict[str, Any]) -> None:
        step = int(row["round"]) + 1
        for k, v in row.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "round" and math.isfinite(v):
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@attrs.frozen(kw_only=True)
class Outcome:
    run_dir: Path
    rows: list[dict[str, Any]]
    state: str
    """``finished``, ``failed`` (no round applied a client update) or ``already-finished`` (a resume)."""
    resumed_from: str | None = None
    error: str | None = None
    stopped: str | None = None
    """Why a component ended the run before its last round (``RunContext.request_stop``), else ``None``."""


def run_experiment(m: Materials, *, out: str | Path | None = None, resume: str | Path | None = None,
                   overwrite: bool = False, progress: str = "auto", stream: Any = None,
                   on_round: Callable[[dict[str, Any]], None] | None = None, strict_versions: bool = False
                   ) -> Outcome:
    """Run (or resume) ``m`` into a run directory and return where it is and its rows. A resume with other
    fedcore, torch or plugin versions than the run's last segment warns in one line (``strict_versions``:
    refuses); every segment's versions are appended to ``manifest.json``'s ``segments``."""
    resolved, fp = m.resolved, m.plan.fingerprint
    if resume is not None:
        rd = RunDir.for_resume(resume, fingerprint=fp, resolved=resolved)
    else:
        rd = RunDir.create(out if out is not None else default_out(resolved["name"]), resolved=resolved,
                           fingerprint=fp, overwrite=overwrite)
    started: list[bool] = []  # set once the engine runs: a storage error then ends a run (exit 1), before a start (2)
    try:  # the directory's lock is held from here to the end of the run
        return _run_locked(m, rd, resume=resume, progress=progress, stream=stream, on_round=on_round,
                           started=started, strict_versions=strict_versions)
    except OSError as exc:  # a full disk, a read-only or vanished directory: one line, nothing half-written
        problem = storage_problem(exc)
        if not started:
            if resume is None:
                shutil.rmtree(rd.path, ignore_errors=True)  # a fresh run that never started leaves nothing
            raise ConfigError(f"cannot write the run directory {rd.path}: {problem}") from None
        with contextlib.suppress(OSError):  # on a full disk this may fail too: status then still says running
            rd.write_status("failed", error=f"storage: {problem}")
        raise RunStorageError(f"the run stopped: could not write {problem}; fix that (free space), then "
                              f"fedcore run --resume {rd.path}") from None
    finally:
        rd.lock.release()


def _earlier_segments(rd: RunDir) -> list[dict[str, Any]]:
    """The segments (one per start or resume) the run directory's manifest records; a manifest written before
    segments were recorded is its own first segment."""
    old = rd.manifest()
    return list(old.get("segments") or [{"from_round": 0, "started": old.get("written"),
                                          "versions": old.get("versions") or {}, "command": old.get("command"),
                                          "resumed_from": old.get("resumed_from")}])


def _run_locked(m: Materials, rd: RunDir, *, resume: str | Path | None, progress: str, stream: Any,
                on_round: Callable[[dict[str, Any]], None] | None, started: list[bool],
                strict_versions: bool) -> Outcome:
    resolved = m.resolved
    if resume is not None:
        if rd.status().get("state") == "finished":
            return Outcome(run_dir=rd.path, rows=rd.rows(), state="already-finished",
                           stopped=rd.status().get("stopped"))
        changes = version_changes(_earlier_segments(rd)[-1]["versions"], versions()) if rd.manifest() else []
        if changes and strict_versions:
            raise ConfigError(f"--resume {rd.path} --strict-versions: the run's earlier rounds ran with other "
                              f"versions ({'; '.join(changes)}); resume without --strict-versions to continue "
                              f"with these")
        if changes:
            print(f"fedcore: warning: resuming {rd.path} with other versions than its earlier rounds: "
                  f"{'; '.join(changes)} (each segment's versions are kept in manifest.json)", file=sys.stderr)
    else:
        rd.write_config(resolved)
    cfg = m.plan.config
    display = RunProgress(name=resolved["name"], rounds=cfg["rounds"], mode=progress, stream=stream)
    checkpointer = Checkpointer(rd.checkpoints, every=cfg["checkpoint"]["every"], keep=cfg["checkpoint"]["keep"],
                                resume=resume is not None, report=display.note, model=m.model)
    resumed_from = None
    start_round = 0
    if resume is not None:
        path, state = checkpointer.load()
        rows = list(state["history"]) if state else []
        rd.rewrite_rows(rows)  # rows written after the checkpoint are recomputed, exactly
        start_round = len(rows)
        resumed_from = path.name if path is not None else None
    user_pipeline = m.plan.pipeline
    n_defaults = sum(1 for row in user_pipeline.describe()["components"] if row["default"])
    given = user_pipeline.components[:len(user_pipeline.components) - n_defaults]
    observer = ProgressObserver(display if display.mode != "none" else None)
    running = Pipeline([observer, *given])
    written = manifest(m, user_pipeline, resumed_from=resumed_from)
    written["segments"] = [*(_earlier_segments(rd) if resume is not None and rd.manifest() else ()),
                           {"from_round": start_round, "started": written["written"], "versions": written["versions"],
                            "command": written["command"], "resumed_from": resumed_from}]
    rd.write_manifest(written)
    tb = TensorBoardLog(rd.tensorboard, purge_step=start_round + 1 if resume is not None else None) \
        if cfg["output"]["tensorboard"] else None

    def after_round(record: dict[str, Any]) -> None:
        nonlocal written
        rd.append_round(record)
        decided = engine.run_ctx.settings
        if decided and decided != written.get("decided"):
            written = {**written, "decided": copy.deepcopy(decided)}
            rd.write_manifest(written)
        if tb is not None:
            tb.add(record)
        display.round_done(record)
        rd.write_status("running", rounds_done=int(record["round"]) + 1)
        if on_round is not None:
            on_round(record)

    engine = Engine(running, RunSpec(model=m.model, train=m.train, test=m.test, executor=m.executor,
                                     on_round=after_round, checkpoint=checkpointer, out_dir=rd.path, **m.run_kwargs))
    rd.write_status("running", pid=os.getpid(), resumed_from=resumed_from)
    display.start(completed=start_round)
    if resumed_from:
        display.note(f"resumed from {resumed_from} ({start_round} rounds done)")
    started.append(True)
    try:
        result = engine.run()
    except BaseException as exc:
        display.close()
        if resume is None and isinstance(exc, ConfigError) and not rd.rows():
            shutil.rmtree(rd.path, ignore_errors=True)  # refused at set-up (e.g. the partition): leave nothing
            raise
        if not isinstance(exc, OSError):  # a storage error writes its own status (run_experiment)
            rd.write_status("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                            error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        raise
    finally:
        if tb is not None:
            tb.close()
    display.close()
    rows = list(result.history.rows)
    if cfg["output"]["save_model"]:
        rd.save_model(result.model)
    summary: dict[str, Any] = {"rounds_done": len(rows)}
    if result.run.stop_reason is not None:  # a component ended the run early (RunContext.request_stop)
        summary["stopped"] = result.run.stop_reason
    key = accuracy_key(rows[-1]) if rows else None
    if key:
        summary["final_" + key] = rows[-1][key]
    failure = result.history.failure()
    if failure is not None:  # every round failed: the run produced nothing, say so and exit non-zero
        rd.write_status("failed", error=failure, **summary)
        return Outcome(run_dir=rd.path, rows=rows, state="failed", resumed_from=resumed_from, error=failure)
    rd.write_status("finished", **summary)
    return Outcome(run_dir=rd.path, rows=rows, state="finished", resumed_from=resumed_from,
                   stopped=result.run.stop_reason)


__all__ = ["Outcome", "default_out", "is_run_dir", "manifest", "prepare", "run_experiment"]
