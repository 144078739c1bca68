"""Storage errors on the run directory (issue 29, item 3): a read-only place, a disk full at start, a disk filling
while ``status.json``, a row or the final model is written. Promise: one ``fedcore: error:`` line, exit 2 before the
run and 1 during it, no temporary file left, and the run directory resumable: after freeing space, ``--resume``
gives the uninterrupted history (and model). ENOSPC is injected at the run directory's file layer, in-process."""
import errno
import os

from battery import comparable, config_text, rows_of, status_of
import pytest
import safetensors.torch
from safetensors.torch import load_file
import torch

from fedcore.cli import main
from fedcore.experiment import rundir as rundir_module

ROUNDS = 4


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    config = root / "c.toml"
    config.write_text(config_text("sync", rounds=ROUNDS, epochs=1))
    ref = root / "reference"
    assert main(["run", str(config), "--out", str(ref), "--progress", "none"]) == 0
    return config, rows_of(ref), load_file(str(ref / "model.safetensors"))


def same_tensors(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def one_error(capsys, rc, code):
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == code and len(lines) == 1 and lines[0].startswith("fedcore: error: "), err
    return lines[0]


def temporaries(run_dir):
    return [p for p in run_dir.rglob("*") if ".tmp" in p.name]


def full_disk_on(monkeypatch, name, *, after=0):
    """Every write of the run-directory file ``name`` fails with ENOSPC, after ``after`` good writes."""
    real, seen = rundir_module._fsync_write, []

    def write(path, data):
        if path.name.startswith(f".{name}.tmp-"):
            seen.append(path)
            if len(seen) > after:  # as a real full disk: the file is created, part of it written
                path.write_bytes(data[:1])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(rundir_module, "_fsync_write", write)


def test_out_on_a_place_that_cannot_be_written_is_one_line_exit_2(tmp_path, capsys, reference):
    config = reference[0]
    line = one_error(capsys, main(["run", str(config), "--out", "/sys/fedcore-run", "--progress", "none"]), 2)
    assert "/sys/fedcore-run" in line and not os.path.exists("/sys/fedcore-run")


def test_a_disk_full_at_start_leaves_nothing_and_the_retry_runs(tmp_path, capsys, reference, monkeypatch):
    config, expected, _ = reference
    run_dir = tmp_path / "run"
    full_disk_on(monkeypatch, "status.json")
    line = one_error(capsys, main(["run", str(config), "--out", str(run_dir), "--progress", "none"]), 2)
    assert "No space left on device" in line and not run_dir.exists()
    monkeypatch.undo()  # space freed: the same command runs
    assert main(["run", str(config), "--out", str(run_dir), "--progress", "none"]) == 0
    assert comparable(rows_of(run_dir)) == comparable(expected)


@pytest.mark.parametrize("name", ["status.json", "metrics.jsonl"])
def test_a_disk_filling_during_the_run_stops_it_in_one_line_and_the_resume_is_exact(tmp_path, capsys, reference,
                                                                                    monkeypatch, name):
    config, expected, model = reference
    run_dir = tmp_path / "run"
    if name == "metrics.jsonl":  # rows are appended: the append of round 2's row fails
        real_append = rundir_module.RunDir.append_row

        def append(self, row):
            if row["round"] == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path / "metrics.jsonl"))
            real_append(self, row)

        monkeypatch.setattr(rundir_module.RunDir, "append_row", append)
    else:
        full_disk_on(monkeypatch, name, after=3)  # the status of start, run start and round 0 are written
    line = one_error(capsys, main(["run", str(config), "--out", str(run_dir), "--progress", "none"]), 1)
    assert "No space left on device" in line and f"--resume {run_dir}" in line
    assert temporaries(run_dir) == []
    assert status_of(run_dir)["state"] in ("running", "failed")  # status.json itself may be what cannot be written
    monkeypatch.undo()
    assert main(["run", "--resume", str(run_dir), "--progress", "none"]) == 0
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert same_tensors(load_file(str(run_dir / "model.safetensors")), model)


def test_a_disk_full_when_the_final_model_is_written_fails_the_run_and_the_resume_writes_it(tmp_path, capsys,
                                                                                            reference, monkeypatch):
    config, expected, model = reference
    run_dir = tmp_path / "run"
    real = safetensors.torch.save_file

    def full(tensors, filename, metadata=None):
        if "model.safetensors" not in str(filename):  # checkpoints are written; the disk fills at the model
            return real(tensors, filename, metadata=metadata)
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    line = one_error(capsys, main(["run", str(config), "--out", str(run_dir), "--progress", "none"]), 1)
    assert "No space left on device" in line
    assert status_of(run_dir)["state"] == "failed" and "storage" in status_of(run_dir)["error"]
    assert temporaries(run_dir) == [] and not (run_dir / "model.safetensors").exists()
    monkeypatch.setattr(safetensors.torch, "save_file", real)
    assert main(["run", "--resume", str(run_dir), "--progress", "none"]) == 0
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert same_tensors(load_file(str(run_dir / "model.safetensors")), model)
