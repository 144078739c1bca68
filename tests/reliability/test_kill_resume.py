"""kill -9 a real ``fedcore run`` at seeded random moments under each scheduler, with faults; resume: identical run.

This is the suite's kill/resume harness: one killed run per scheduler. The sync case also tears the newest
checkpoint before the resume (a write cut short), which the resume must skip with a note, falling back to the one
before (formerly tests/test_cli_resume.py, its own killed run). The one-kill cases run the killed run on the threads
executor (its waves train in a thread pool) and compare it with the inline reference, so they also check that a
threaded run checkpoints and resumes to the inline history; the repeated-kill cases stay inline."""
import random
import shutil

from battery import SCHEDULES, comparable, config_text, kill_at, rows_of, status_of
import pytest
from safetensors.torch import load_file
import torch

from fedcore.cli import main

pytestmark = pytest.mark.integration  # every case kills a real `fedcore run` process

ROUNDS = 8
EPOCHS = {"async": 24}
"""Local epochs per job (the battery's 6 elsewhere). An asynchronous row is one client's update, so at 6 epochs the
six rows after async's first seeded moment (2 rows + 0.18 s) took under 0.18 s on a quiet machine: that moment and
the next were drawn again (two more killed processes, ~5 s) before one landed. Four times the work per row lets the
first moment land; the moments drawn are the same."""


def reference(tmp_path, schedule, executor='"inline"'):
    """The inline run (in this process), and the config the killed runs use (``executor`` for them)."""
    config = tmp_path / f"{schedule}.toml"
    config.write_text(config_text(schedule, rounds=ROUNDS, epochs=EPOCHS.get(schedule, 6)))
    ref = tmp_path / "reference"
    assert main(["run", str(config), "--out", str(ref), "--progress", "none"]) == 0
    rows = rows_of(ref)
    assert len(rows) == ROUNDS and any(r.get("dropout") or r.get("lost") for r in rows)  # the faults happened
    killed = tmp_path / f"{schedule}-killed.toml"
    killed.write_text(config_text(schedule, rounds=ROUNDS, epochs=EPOCHS.get(schedule, 6), executor=executor))
    return killed, ref, rows


def same_model(a, b):
    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def tear_newest_checkpoint(run_dir):
    """Cut the newest checkpoint's tensor file short (a torn write); returns the checkpoints, oldest first."""
    checkpoints = sorted(p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("round-"))
    assert len(checkpoints) >= 2, f"the kill left {len(checkpoints)} checkpoint(s); tearing needs one to fall back to"
    tensors = checkpoints[-1] / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-7])
    return checkpoints


def kill_and_resume(config, run_dir, rng, kills, capsys, tear=False):
    """``kills`` SIGKILLs at seeded moments (rows written + a delay), a resume after each; returns rows at each kill.

    A moment the run outlives is drawn again: the first run starts over in a fresh directory (its last try kills
    as soon as the first row lands, so a fast machine cannot finish every try first); a resumed run that finished
    before its kill ends the killing, since nothing is left to kill. ``tear``: the newest checkpoint is torn before
    the last resume, which must skip it (it says so) and resume from the one before. The last resume runs in this
    process (``fedcore.cli.main``: a process that never saw the run, as a fresh one); only the kills need a process
    of their own."""
    done = []
    for i in range(kills):
        if i and len(rows_of(run_dir)) > ROUNDS - 2:
            break  # too few rounds left for another kill
        got = -1
        for attempt in range(5 if i == 0 else 1):
            if i == 0 and run_dir.exists():
                shutil.rmtree(run_dir)  # the previous try ran to the end: start over
            last = i == 0 and attempt == 4
            after = 1 if last else rng.randint(len(rows_of(run_dir)), ROUNDS - 2) if i else rng.randint(1, ROUNDS - 2)
            args = ["run", str(config), "--out", str(run_dir)] if i == 0 else ["run", "--resume", str(run_dir)]
            got = kill_at(args, run_dir, after_rows=after, delay=0.0 if last else rng.uniform(0.0, 0.25))
            if got >= 0:
                done.append(got)
                break
        if got < 0 and i > 0:
            break  # the resumed run finished before the kill landed
        assert got >= 0, "no kill landed before the run finished"
        assert status_of(run_dir)["state"] == "running"  # killed: nobody wrote finished or failed
    if tear:
        assert status_of(run_dir)["state"] == "running", "the run finished before it could be killed"
        *_, fallback, torn = tear_newest_checkpoint(run_dir)
    if status_of(run_dir)["state"] != "finished":
        capsys.readouterr()
        assert main(["run", "--resume", str(run_dir), "--progress", "plain" if tear else "none"]) == 0
        err = capsys.readouterr().err
        if tear:
            assert f"checkpoint skipped: {torn.name}" in err, err
            assert f"resumed from {fallback.name}" in err, err
            assert status_of(run_dir)["resumed_from"] == fallback.name
    return done


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_one_kill_at_a_seeded_moment_then_resume_is_the_uninterrupted_run(tmp_path, capsys, schedule):
    config, ref, expected = reference(tmp_path, schedule, executor='{ name = "threads", workers = 2 }')
    capsys.readouterr()
    run_dir = tmp_path / "killed"
    # sync's seeded moment is after 5 of 8 rows: two checkpoints on disk (keep = 2), so the newest can be torn
    kill_and_resume(config, run_dir, random.Random(f"kill-{schedule}"), kills=1, capsys=capsys,
                    tear=schedule == "sync")
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert status_of(run_dir)["state"] == "finished" and same_model(run_dir, ref)


@pytest.mark.reliability_long
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_repeated_kills_at_seeded_moments_then_resume_is_the_uninterrupted_run(tmp_path, capsys, schedule, seed):
    config, ref, expected = reference(tmp_path, schedule)
    capsys.readouterr()
    run_dir = tmp_path / "killed"
    kill_and_resume(config, run_dir, random.Random(f"kills-{schedule}-{seed}"), kills=3, capsys=capsys)
    assert comparable(rows_of(run_dir)) == comparable(expected)
    assert status_of(run_dir)["state"] == "finished" and same_model(run_dir, ref)
