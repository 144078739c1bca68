"""One writer per run directory (issue 29, item 1): a second ``fedcore run`` on a live run directory is refused
naming the holder; a dead holder's lock is no obstacle; a killed sweep takes its cells with it, and its resume
redoes no finished cell and gives the uninterrupted sweep's numbers.

Each case runs real ``fedcore`` processes through the battery's harness; the live writer is held still with
SIGSTOP while the second one tries, so the race is decided by the lock and not by timing."""
import os
import signal
import time

from battery import alive, comparable, config_text, rows_of, start, status_of, wait_rows
import pytest

from fedcore.cli import main
from fedcore.experiment import run_sweep
from fedcore.experiment.run_lock import RunLock
from fedcore.experiment.sweep_spec import load_sweep_spec

ROUNDS = 5


@pytest.mark.integration
def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path, capsys):
    """The holder is a real process (held still, then killed); the second writers and the resume run the CLI's
    own ``main`` in this process, which is all they need to be: another process than the holder."""
    config = tmp_path / "c.toml"
    config.write_text(config_text("sync", rounds=ROUNDS, epochs=2))
    run_dir = tmp_path / "run"
    first = start(["run", str(config), "--out", str(run_dir)])
    try:
        wait_rows(run_dir, 1, first)
        os.kill(first.pid, signal.SIGSTOP)  # alive, holding the lock, writing nothing
        for args in (["run", "--resume", str(run_dir)], ["run", str(config), "--out", str(run_dir), "--overwrite"]):
            capsys.readouterr()
            code = main([*args, "--progress", "none"])
            err = capsys.readouterr().err
            lines = err.strip().splitlines()
            assert code == 2, err
            assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "fedcore: error:" in lines[0], lines
        os.kill(first.pid, signal.SIGKILL)  # the holder dies holding the lock
        os.kill(first.pid, signal.SIGCONT)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert (run_dir / ".lock").read_text().strip() == str(first.pid)  # the stale pid is still in the file
    assert main(["run", "--resume", str(run_dir), "--progress", "none"]) == 0, capsys.readouterr().err
    assert [r["round"] for r in rows_of(run_dir)] == list(range(ROUNDS))  # one row per round
    assert status_of(run_dir)["state"] == "finished"


SWEEP = config_text("sync", rounds=ROUNDS, epochs=4) + '\n[sweep]\nseeds = 2\n'
KILLED_SWEEP = config_text("sync", rounds=6, epochs=4) + '\n[sweep]\nseeds = 4\n'


@pytest.mark.integration
def test_a_killed_sweep_ends_its_cells_and_the_resumed_sweep_redoes_nothing_finished(tmp_path, capsys):
    """One killed sweep for both sweep-kill properties (it was two killed sweeps, this one and
    tests/test_sweep.py's). ``fedcore sweep --jobs 2`` over four cells: the first runs to the end in its child
    process; the second and the third are held still (SIGSTOP) once they wrote two rows (checkpoints behind them),
    so none can finish and the fourth finds no free slot before the sweep is SIGKILLed. Then no cell outlives its
    sweep (the parent-death signal waits for SIGCONT) and the held cells are left cut short; ``fedcore sweep
    --resume`` (in this process: only the killed sweep had to be real) skips the finished cell without touching it,
    resumes the held ones from their checkpoints and starts the fourth, and every cell equals the uninterrupted
    sweep's (the finished one run in a child process, the others resumed or started here)."""
    config = tmp_path / "s.toml"
    config.write_text(KILLED_SWEEP)
    reference = run_sweep(config, out=tmp_path / "reference")
    assert [c.state for c in reference.cells] == ["finished"] * 4
    out = tmp_path / "sweep"
    sweep = start(["sweep", str(config), "--jobs", "2", "--out", str(out)])
    cells = [out / cell.dirname for cell in load_sweep_spec(config).cells()]
    first, held, fourth = cells[0], cells[1:3], cells[3]
    pids: list[int] = []
    try:
        for cell in held:  # cells 0 and 1 start; 1 is held; 2 starts when 0 has finished, and is held
            wait_rows(cell, 2, sweep)
            pids.append(int((cell / ".lock").read_text()))
            os.kill(pids[-1], signal.SIGSTOP)
        if sweep.poll() is not None:
            pytest.fail(f"the sweep ended before it was killed: {sweep.stderr.read()[-2000:]}")
        assert all(alive(pid) for pid in pids)
        assert status_of(first)["state"] == "finished" and not (fourth / "metrics.jsonl").exists()
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
    finally:
        for pid in pids:  # the parent-death signal waits for them to run again
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), "a cell outlived its sweep"
    states = [status_of(cell)["state"] for cell in held]
    assert set(states) <= {"interrupted", "running"}, states
    stamp = (first / "metrics.jsonl").stat().st_mtime_ns, (first / "status.json").read_bytes()

    capsys.readouterr()
    assert main(["sweep", "--resume", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "base/seed-0: skipped" in printed and "1 already finished" in printed, printed
    assert ((first / "metrics.jsonl").stat().st_mtime_ns, (first / "status.json").read_bytes()) == stamp
    for cell in held:
        status = status_of(cell)
        assert status["state"] == "finished" and status["resumed_from"].startswith("round-"), status
    for cell in reference.cells:
        mine = out / cell.run_dir.relative_to(reference.directory)
        assert comparable(rows_of(mine)) == comparable(rows_of(cell.run_dir)) and status_of(mine)["state"] == "finished"
        assert [r["round"] for r in rows_of(mine)] == list(range(6))


@pytest.mark.integration
def test_a_resumed_sweep_puts_no_second_writer_on_a_live_cell(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text(SWEEP.replace("epochs = 4", "epochs = 1").replace("rounds = 5", "rounds = 2"))
    out = tmp_path / "sweep"
    first = run_sweep(config, out=out)
    live = first.cells[0].run_dir
    (live / "status.json").write_text((live / "status.json").read_text().replace('"finished"', '"running"'))
    before = (live / "metrics.jsonl").read_bytes()
    with RunLock(live):  # a live writer (this process) holds the cell
        again = run_sweep(config, out=out)
    states = {c.run_dir: c for c in again.cells}
    assert states[live].state == "failed" and f"pid {os.getpid()}" in states[live].error
    assert (live / "metrics.jsonl").read_bytes() == before  # nothing written under the live writer
    assert states[first.cells[1].run_dir].state == "skipped"
