"""SIGTERM (what ``docker stop`` and cluster schedulers send) is handled like Ctrl-C (issue 29, item 3): the run
records ``interrupted``, exits 143 with one line, and ``--resume`` gives the uninterrupted history."""
import os
import signal

from battery import comparable, config_text, rows_of, start, status_of, wait_rows
import pytest

from fedcore.cli import main

ROUNDS = 5


@pytest.mark.integration
def test_sigterm_leaves_an_interrupted_resumable_run(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(config_text("buffered", rounds=ROUNDS, epochs=3))
    ref = tmp_path / "reference"
    assert main(["run", str(config), "--out", str(ref), "--progress", "none"]) == 0
    capsys.readouterr()
    run_dir = tmp_path / "run"
    proc = start(["run", str(config), "--out", str(run_dir)])
    wait_rows(run_dir, 1, proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    status = status_of(run_dir)
    assert proc.returncode == 143 and err.strip().splitlines() == [
        "fedcore: terminated (SIGTERM); continue with fedcore run --resume RUN_DIR"], err
    assert status["state"] == "interrupted" and status["pid"] == proc.pid and len(rows_of(run_dir)) < ROUNDS
    assert main(["run", "--resume", str(run_dir), "--progress", "none"]) == 0  # the resume needs no process of its own
    assert comparable(rows_of(run_dir)) == comparable(rows_of(ref)) and status_of(run_dir)["state"] == "finished"
