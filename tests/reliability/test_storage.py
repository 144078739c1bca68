"""Damaged storage: corrupt or truncated checkpoints and metrics.jsonl, a full disk during a checkpoint.

Promise: a resume continues from the newest checkpoint that verifies and gives the uninterrupted history;
a checkpoint that cannot be written leaves nothing partial and one clear error, and the last good one resumes.
"""
import errno
import os
from pathlib import Path
import shutil
import subprocess

from battery import built_once, comparable, config_text, copy_of_run, crashed_run, rows_of, status_of
import pytest

from fedcore.cli import main
from fedcore.engine import checkpoint_files as checkpoint_module  # where checkpoints are written
from fedcore.engine.checkpoint import JOURNALS, list_checkpoints, read_checkpoint
from fedcore.experiment.runner import prepare, run_experiment

ROUNDS = 6
STORAGE_RUNS = pytest.mark.xdist_group("storage-runs")
"""The cases that start from the shared reference and crashed runs (here and in test_checkpoint_content.py) run on
one xdist worker, which makes those runs once."""
pytestmark = STORAGE_RUNS


def _reference(root):
    config = root / "sync.toml"
    config.write_text(config_text("buffered", rounds=ROUNDS, epochs=2).replace("keep = 2", "keep = 4"))
    assert main(["run", str(config), "--out", str(root / "reference"), "--progress", "none"]) == 0
    return config, rows_of(root / "reference")


@pytest.fixture
def reference(tmp_path_factory, capsys):
    """The cases' config and its uninterrupted history: one run per test process (``battery.built_once``), which
    no case writes into (these cases and test_checkpoint_content's share it)."""
    config, rows = built_once(tmp_path_factory.getbasetemp() / "storage-reference", _reference)
    capsys.readouterr()
    return config, [dict(row) for row in rows]


def crashed_at(config, run_dir, round):
    """The run stopped (in-process) right after ``round``'s row was written, as by a kill before its checkpoint:
    a copy of the one such run this process made (``battery.built_once``), which the case may damage."""
    stopped = built_once(config.parent / f"crashed-at-{round}", lambda root: crashed_run(config, root / "run", round))
    copy_of_run(stopped, run_dir)


def resume(run_dir, capsys):
    rc = main(["run", "--resume", str(run_dir), "--progress", "plain"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    return err


def _truncate_tensors(d):
    (d / "tensors.safetensors").write_bytes((d / "tensors.safetensors").read_bytes()[:-9])


def _flip_a_bit(d):
    data = bytearray((d / "tensors.safetensors").read_bytes())
    data[-5] ^= 1
    (d / "tensors.safetensors").write_bytes(bytes(data))


def _drop_the_digest(d):
    next(p for p in d.iterdir() if p.name not in ("tensors.safetensors", "state.json")).unlink()


DAMAGE = {
    "tensors-truncated": _truncate_tensors,
    "tensors-bit-flip": _flip_a_bit,
    "state-truncated": lambda d: (d / "state.json").write_text((d / "state.json").read_text()[:40]),
    "state-garbage": lambda d: (d / "state.json").write_bytes(os.urandom(64)),
    "digest-missing": _drop_the_digest,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_newest_checkpoint_is_skipped_and_the_resume_is_exact(tmp_path, capsys, reference, damage):
    config, expected = reference
    run_dir = tmp_path / "run"
    crashed_at(config, run_dir, 3)
    newest, previous = list_checkpoints(run_dir / "checkpoints")[-2:][::-1]
    DAMAGE[damage](newest)
    err = resume(run_dir, capsys)
    assert f"checkpoint skipped: {newest.name}" in err and f"resumed from {previous.name}" in err
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert status_of(run_dir)["state"] == "finished"


def test_every_checkpoint_damaged_resumes_from_round_0_exactly(tmp_path, capsys, reference):
    config, expected = reference
    run_dir = tmp_path / "run"
    crashed_at(config, run_dir, 2)
    for path in list_checkpoints(run_dir / "checkpoints"):
        DAMAGE["tensors-truncated"](path)
    err = resume(run_dir, capsys)
    assert "no usable checkpoint; starting from round 0" in err
    assert comparable(rows_of(run_dir)) == comparable(expected)


@pytest.mark.parametrize("damage", ["torn-last-line", "garbage-line", "emptied"])
def test_a_damaged_metrics_file_is_rewritten_from_the_checkpoint(tmp_path, capsys, reference, damage):
    config, expected = reference
    run_dir = tmp_path / "run"
    crashed_at(config, run_dir, 3)
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text({"torn-last-line": "".join(lines[:-1]) + lines[-1][:17],
                        "garbage-line": "".join(lines[:2]) + "\x00{not json\n" + "".join(lines[2:]),
                        "emptied": ""}[damage])
    resume(run_dir, capsys)
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert all(line.endswith("}") for line in metrics.read_text().splitlines())


def test_a_full_disk_during_a_checkpoint_leaves_the_last_good_one_usable(tmp_path, capsys, reference, monkeypatch):
    """ENOSPC injected at the file layer (the checkpoint's state file of round 4): no partial checkpoint, one error."""
    config, expected = reference
    run_dir = tmp_path / "run"
    real = checkpoint_module._fsync_write

    def full_disk(path, data):
        if path.parent.name.startswith(".tmp-round-000004"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(checkpoint_module, "_fsync_write", full_disk)
    rc = main(["run", str(config), "--out", str(run_dir), "--progress", "none"])
    _, err = capsys.readouterr()
    assert rc == 1 and len(err.strip().splitlines()) == 1
    assert "could not write checkpoint round-000004" in err and "No space left on device" in err
    assert "the last good checkpoint is round-000003" in err
    assert status_of(run_dir)["state"] == "failed"
    leftovers = [p.name for p in (run_dir / "checkpoints").iterdir()
                 if not p.name.startswith("round-") and p.name not in JOURNALS.values()]
    assert leftovers == []  # nothing half-written
    read_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])  # the last good one verifies
    monkeypatch.undo()  # space freed
    resume(run_dir, capsys)
    assert comparable(rows_of(run_dir)) == comparable(expected)


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.reliability_long
def test_a_real_full_tmpfs_during_a_checkpoint_leaves_the_last_good_one_usable(tmp_path, capsys, reference):
    """Where mounting is permitted: the run directory on a 1 MiB tmpfs, filled up after round 2's row."""
    config, expected = reference
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("mounting a tmpfs is not permitted here (the injected ENOSPC case covers the promise)")
    try:
        run_dir = disk / "run"

        def fill(row):
            if row["round"] == 2:  # leave a few pages: enough for rows and status, not for a checkpoint
                free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
                (disk / "filler").write_bytes(b"\0" * max(0, free - 3 * 4096))

        with pytest.raises(Exception, match="could not write checkpoint round-00000[34]"):
            run_experiment(prepare(config), out=run_dir, progress="none", on_round=fill)
        assert not [p for p in (run_dir / "checkpoints").iterdir()
                    if not p.name.startswith("round-") and p.name not in JOURNALS.values()]
        (disk / "filler").unlink()
        resume(run_dir, capsys)
        assert comparable(rows_of(run_dir)) == comparable(expected)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
