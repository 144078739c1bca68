"""The run directory: everything a run leaves on disk, and the rule that a run never overwrites another.

    RUN_DIR/
      config.toml          the resolved config (every default filled in): `fedcore run RUN_DIR/config.toml` repeats it
      manifest.json        Pipeline.describe(), seed, fingerprint, versions of Python, torch and every plugin
      status.json          running | finished | failed, rounds done, fingerprint, pid, times
      metrics.jsonl        one JSON row per round, appended and flushed as the run goes
      client_metrics.jsonl one JSON row per aggregated client update (round, client, its metrics), when
                           output.client_metrics = true
      model.safetensors    the final global model
      checkpoints/         round-NNNNNN/ (see fedcore.engine.checkpoint)
      tensorboard/         event log when output.tensorboard = true
      .lock                held (flock) by the one process writing the directory; holds its pid
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
import datetime as _dt
import json
import os
from pathlib import Path
import platform
import shutil
import sys
from typing import Any

import tomli_w

from fedcore.errors import ConfigError, FedcoreError
from fedcore.experiment.run_lock import LOCK, RunLock

CONFIG, MANIFEST, STATUS = "config.toml", "manifest.json", "status.json"
METRICS, MODEL = "metrics.jsonl", "model.safetensors"
CLIENT_METRICS = "client_metrics.jsonl"
CHECKPOINTS, TENSORBOARD = "checkpoints", "tensorboard"
MARKERS = (STATUS, CONFIG, METRICS)


class RunStorageError(FedcoreError):
    """The run directory could not be written during a run (a full disk): the run stops, exit 1, resumable."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _fsync_write(path: Path, data: bytes) -> None:
    """The one place run-directory files are written (tests inject a full disk here)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """``path`` holds the old bytes or the new ones, never a part; a failed write leaves no temporary file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        _fsync_write(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def storage_problem(exc: OSError) -> str:
    """``RUN_DIR/status.json: No space left on device``: the file and the system's reason, one line."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out
    return {prefix: value}


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any], limit: int = 4) -> str:
    fa, fb = flatten(a), flatten(b)
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
    shown = [f"{k}: {fa.get(k, '(unset)')!r} -> {fb.get(k, '(unset)')!r}" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return "; ".join(shown) + more


def split_client_metrics(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A history row without its ``client_metrics`` entry, and that entry's rows (each with the round)."""
    plain = {k: v for k, v in row.items() if k != "client_metrics"}
    entries = [{"round": row.get("round"), **e} for e in row.get("client_metrics", ())]
    return plain, entries


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / m).exists() for m in MARKERS)


def _debris(name: str) -> bool:
    """The lock file and an interrupted atomic write's temporary: nothing a run left worth keeping."""
    return name == LOCK or (name.startswith(".") and ".tmp-" in name)


def holds_nothing(path: Path) -> bool:
    return all(_debris(p.name) for p in path.iterdir())


def versions() -> dict[str, Any]:
    import fedcore

    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                           "fedcore": fedcore.__version__}
    for mod in ("torch", "numpy", "pluggy", "timm"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", None)
    out["plugins"] = {p.name: {"distribution": p.distribution, "version": p.version, "ok": p.ok}
                      for p in fedcore.list_plugins()}
    return out


def version_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``torch 2.3.0 -> 2.4.1``, ``plugin lora 0.1.0 -> (absent)``: what differs in fedcore, torch and the
    plugins between two :func:`versions` records (Python, numpy and the platform are recorded, not compared)."""
    changes = [f"{k} {before.get(k)} -> {now.get(k)}" for k in ("fedcore", "torch") if before.get(k) != now.get(k)]
    old_plugins, new_plugins = before.get("plugins") or {}, now.get("plugins") or {}
    for name in sorted(set(old_plugins) | set(new_plugins)):
        a, b = (old_plugins.get(name) or {}).get("version"), (new_plugins.get(name) or {}).get("version")
        if a != b:
            changes.append(f"plugin {name} {a or '(absent)'} -> {b or '(absent)'}")
    return changes


class RunDir:
    """One run's directory. Create with :meth:`create` (a new run) or :meth:`for_resume`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock = RunLock(self.path)

    # -- opening ----------------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, *, resolved: Mapping[str, Any], fingerprint: str, overwrite: bool = False
               ) -> RunDir:
        """A fresh run directory. One that holds a run (or anything else) is an error unless ``overwrite``,
        and ``overwrite`` only ever replaces a fedcore run directory."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--out {path}: exists and is not a directory")
        if path.is_dir() and not holds_nothing(path):
            if not is_run_dir(path):
                raise ConfigError(f"--out {path}: the directory is not empty and is not a fedcore run directory; "
                                  f"choose another --out")
            if not overwrite:
                raise ConfigError(f"--out {path}: {cls(path).describe_against(resolved, fingerprint)}; choose "
                                  f"another --out, continue it with --resume {path}, or pass --overwrite to replace it")
        made = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {path}: cannot create the run directory: {storage_problem(exc)}") from None
        rd = cls(path)
        try:
            rd.lock.acquire()  # before anything is removed or written: a live writer keeps its directory
        except OSError as exc:
            raise ConfigError(f"--out {path}: cannot write the run directory: {storage_problem(exc)}") from None
        try:
            for entry in path.iterdir():  # --overwrite's old run, or an earlier try's debris
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                elif entry.name != LOCK:
                    entry.unlink()
            rd.write_status("running", fingerprint=fingerprint, rounds_done=0, started=_now())
        except BaseException as exc:
            rd.lock.release()
            if made:  # nothing of ours to keep: a retry finds no directory
                shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, OSError):
                raise ConfigError(f"--out {path}: cannot write the run directory: {storage_problem(exc)}") from None
            raise
        return rd

    @classmethod
    def for_resume(cls, path: str | Path, *, fingerprint: str | None = None, resolved: Mapping[str, Any] | None = None
                   ) -> RunDir:
        path = Path(path)
        if not path.is_dir():
            raise ConfigError(f"--resume {path}: no such directory")
        if not is_run_dir(path) or not (path / CONFIG).is_file():
            raise ConfigError(f"--resume {path}: not a fedcore run directory (no {CONFIG})")
        rd = cls(path)
        if fingerprint is not None and rd.status().get("fingerprint") not in (None, fingerprint):
            diff = config_differences(rd.config(), resolved) if resolved is not None else ""
            raise ConfigError(f"--resume {path}: the directory holds a different run (config differs: {diff}); "
                              f"resume with its own config (fedcore run --resume {path})")
        rd.lock.acquire()  # held until the run ends: a second resume stops here, naming this one's pid
        return rd

    def describe_against(self, resolved: Mapping[str, Any], fingerprint: str) -> str:
        status = self.status()
        state = status.get("state", "unknown")
        done = status.get("rounds_done")
        what = f"{state}, {done} rounds done" if done is not None else state
        if status.get("fingerprint") == fingerprint:
            return f"already holds this run ({what})"
        try:
            diff = config_differences(self.config(), resolved)
        except (OSError, ValueError):
            diff = "unreadable config"
        return f"already holds a different run ({what}; config differs: {diff})"

    # -- contents ---------------------------------------------------------------------------------------

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD

    def config(self) -> dict[str, Any]:
        import tomllib

        return tomllib.loads((self.path / CONFIG).read_text())

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / STATUS).read_text())
        except (OSError, ValueError):
            return {}

    def write_status(self, state: str, **fields: Any) -> None:
        status = self.status()
        status.update(fields, state=state, updated=_now(), pid=os.getpid())
        atomic_write(self.path / STATUS, (json.dumps(status, indent=2, sort_keys=True) + "\n").encode())

    def write_config(self, resolved: Mapping[str, Any]) -> None:
        header = "# Resolved by fedcore: every default filled in. `fedcore run` on this file repeats the run.\n"
        atomic_write(self.path / CONFIG, (header + tomli_w.dumps(dict(resolved))).encode())

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / MANIFEST).read_text())
        except (OSError, ValueError):
            return {}

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n"
        atomic_write(self.path / MANIFEST, text.encode())

    def rows(self) -> list[dict[str, Any]]:
        path = self.path / METRICS
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    break  # a line cut by a kill: the rows before it are good
        return rows

    def append_row(self, row: Mapping[str, Any]) -> None:
        with open(self.path / METRICS, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()

    def rewrite_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace the round rows (a resume recomputes those after its checkpoint); a row's per-client metrics
        (``client_metrics``) go to ``client_metrics.jsonl``, which is rewritten with them."""
        rounds, clients = [], []
        for row in rows:
            plain, entries = split_client_metrics(row)
            rounds.append(plain)
            clients += entries
        atomic_write(self.path / METRICS, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rounds).encode())
        if clients or (self.path / CLIENT_METRICS).exists():
            atomic_write(self.path / CLIENT_METRICS,
                         "".join(json.dumps(r, sort_keys=True) + "\n" for r in clients).encode())

    def append_round(self, row: Mapping[str, Any]) -> None:
        """Append a finished round: its row to ``metrics.jsonl``, its per-client metrics (if the engine was asked for
        them, ``RunSpec.client_metrics``) to ``client_metrics.jsonl``."""
        plain, entries = split_client_metrics(row)
        self.append_row(plain)
        if entries:
            with open(self.path / CLIENT_METRICS, "a") as f:
                f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in entries))
                f.flush()

    def client_rows(self) -> list[dict[str, Any]]:
        path = self.path / CLIENT_METRICS
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def save_model(self, model: Any) -> Path:
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
        tmp = self.path / f".{MODEL}.tmp-{os.getpid()}"
        try:
            save_file(tensors, str(tmp), metadata={"format": "pt", "producer": "fedcore"})
            os.replace(tmp, self.path / MODEL)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return self.path / MODEL
