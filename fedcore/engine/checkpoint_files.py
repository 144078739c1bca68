"""A checkpoint on disk: one ``round-NNNNNN`` directory (tensors, state, digest) written atomically, the listing
of a run's checkpoints, and the append-only journals (history, ledger) that checkpoints refer to by line count and
sha256 instead of embedding them. What goes into a checkpoint and how a run resumes: :mod:`fedcore.engine.checkpoint`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
import hashlib
import json
import os
from pathlib import Path
import re
import shutil
from typing import Any

import torch

from fedcore.engine.state_codec import CheckpointError

FORMAT = 1
TENSORS, STATE, DIGEST = "tensors.safetensors", "state.json", "state.json.sha256"
_NAME = re.compile(r"^round-(\d{6,})$")


def round_of(path: Path) -> int:
    """The round number of a checkpoint directory named ``round-NNNNNN``."""
    match = _NAME.match(path.name)
    if match is None:
        raise CheckpointError(f"{path} is not a checkpoint directory (round-NNNNNN)")
    return int(match.group(1))


JOURNALS = {"history": "history.jsonl", "ledger": "ledger.jsonl"}
"""State entries kept as append-only journals beside the checkpoints, not inside them."""


class Journal:
    """An append-only JSON-lines file whose running sha256 a checkpoint records with its line count."""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        self.path = path
        self.durable = durable  # False: no fsync (a test of resume logic, not of surviving a power cut)
        self.count = 0
        self._hash = hashlib.sha256()
        self._fresh = True

    def append(self, rows: list[Any], plain: Callable[[Any], Any] = lambda row: row) -> dict[str, Any]:
        """Write ``plain(row)`` of ``rows[count:]`` (the rows since the last call), fsynced: only the new rows are
        touched, so the cost does not grow with the run. Returns the reference a checkpoint keeps."""
        if self._fresh:  # a new run (or the first checkpoint after a resume cut it back): start from what we know
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.count == 0:
                self.path.write_bytes(b"")
            self._fresh = False
        new = rows[self.count:]
        if new:
            data = "".join(json.dumps(plain(r), sort_keys=True) + "\n" for r in new).encode()
            with open(self.path, "ab") as f:
                f.write(data)
                f.flush()
                if self.durable:
                    os.fsync(f.fileno())
            self._hash.update(data)
            self.count = len(rows)
        return {"file": self.path.name, "rows": self.count, "sha256": self._hash.hexdigest()}

    def read(self, ref: Mapping[str, Any], where: str) -> list[Any]:
        """The first ``ref["rows"]`` lines, verified against ``ref["sha256"]`` (a CheckpointError if not)."""
        want = int(ref["rows"])
        try:
            with open(self.path, "rb") as f:
                lines = [f.readline() for _ in range(want)]
        except OSError as exc:
            raise CheckpointError(f"{where}: {self.path.name} unreadable ({exc})") from None
        if (want and not lines[-1].endswith(b"\n")) or hashlib.sha256(b"".join(lines)).hexdigest() != ref["sha256"]:
            got = sum(1 for line in lines if line.endswith(b"\n"))
            raise CheckpointError(f"{where}: its {self.path.stem} has {got} rows in {self.path.name} that match "
                                  f"its checksum, not the {want} it records")
        return [json.loads(line) for line in lines]

    def cut_to(self, ref: Mapping[str, Any]) -> None:
        """Resume from a checkpoint: the journal keeps exactly the lines that checkpoint covers."""
        want = int(ref["rows"])
        with open(self.path, "rb") as f:
            data = b"".join(f.readline() for _ in range(want))
        with open(self.path, "r+b") as f:
            f.truncate(len(data))
            f.flush()
            if self.durable:
                os.fsync(f.fileno())
        self.count, self._hash, self._fresh = want, hashlib.sha256(data), False


# -- files -------------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_checkpoint(root: str | Path, state: dict[str, Any], tensors: dict[str, torch.Tensor], *,
                     durable: bool = True) -> Path:
    """Write ``root/round-NNNNNN`` atomically (temporary directory, fsync, ``os.replace``). ``durable=False`` skips
    the fsyncs (still atomic against a killed process, whose writes the kernel keeps; not against a power cut)."""
    from safetensors.torch import save_file

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"round-{int(state['round']):06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_file(tensors, str(tmp / TENSORS), metadata={"format": str(FORMAT)})
        if durable:
            with open(tmp / TENSORS, "rb") as f:
                os.fsync(f.fileno())
        state = dict(state, files={TENSORS: {"sha256": _sha256(tmp / TENSORS),
                                             "bytes": (tmp / TENSORS).stat().st_size}})
        body = json.dumps(state, sort_keys=True).encode()
        write = _fsync_write if durable else Path.write_bytes
        write(tmp / STATE, body)
        write(tmp / DIGEST, (hashlib.sha256(body).hexdigest() + "\n").encode())
    except Exception as exc:  # a full disk, a quota (safetensors reports ENOSPC as its own error type): remove the
        shutil.rmtree(tmp, ignore_errors=True)  # partial copy; the last good checkpoint stays usable
        good = list_checkpoints(root)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CheckpointError(f"could not write checkpoint {final.name} in {root}: {why}; "
                              f"nothing partial was left, the last good checkpoint is "
                              f"{good[-1].name if good else '(none)'}; free space and --resume") from exc
    if final.exists():  # a round done again after falling back past a bad checkpoint
        old = root / f".old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    if durable:
        dir_fd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return final


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Verify checksums and load; any problem raises :class:`CheckpointError` saying what is wrong."""
    from safetensors.torch import load_file

    path = Path(path)
    for name in (STATE, DIGEST, TENSORS):
        if not (path / name).is_file():
            raise CheckpointError(f"{path.name}: {name} is missing")
    body = (path / STATE).read_bytes()
    expected = (path / DIGEST).read_text().strip()
    if hashlib.sha256(body).hexdigest() != expected:
        raise CheckpointError(f"{path.name}: {STATE} does not match its checksum (corrupt or truncated)")
    state = json.loads(body)
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{path.name}: checkpoint format {state.get('format')!r}; this fedcore reads {FORMAT}")
    info = state["files"][TENSORS]
    size = (path / TENSORS).stat().st_size
    if size != info["bytes"] or _sha256(path / TENSORS) != info["sha256"]:
        raise CheckpointError(f"{path.name}: {TENSORS} does not match its checksum ({size} bytes, expected "
                              f"{info['bytes']}; corrupt or truncated)")
    return state, load_file(str(path / TENSORS))


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first (temporary leftovers are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]
