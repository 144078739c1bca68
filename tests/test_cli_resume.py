"""Kill a real ``fedcore run`` with SIGKILL mid-way, damage its newest checkpoint, resume: identical final metrics."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import torch
from safetensors.torch import load_file

from fedcore.cli import main

ROUNDS = 10
CONFIG = textwrap.dedent(f"""
    name = "kill-me"
    rounds = {ROUNDS}
    num_clients = 4
    seed = 7
    dataset = {{ name = "synthetic", n = 600, n_test = 200, noise = 1.5 }}
    model = {{ name = "tiny-mlp", hidden = 64 }}

    [pipeline]
    partition = {{ name = "dirichlet", alpha = 0.5, min_size = 20 }}
    schedule = {{ name = "uniform", fraction = 0.75 }}
    local_update = {{ name = "sgd", lr = 0.05, momentum = 0.9, epochs = 10, batch_size = 16 }}

    [checkpoint]
    every = 1
    keep = 3
    """)


def rows_of(run_dir):
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def comparable(rows):
    return [{k: v for k, v in r.items() if "wall" not in k} for r in rows]


def test_sigkill_then_resume_gives_the_identical_history(tmp_path, capsys):
    config = tmp_path / "kill.toml"
    config.write_text(CONFIG)
    reference = tmp_path / "reference"
    assert main(["run", str(config), "--out", str(reference), "--progress", "none"]) == 0
    capsys.readouterr()
    expected = rows_of(reference)
    assert len(expected) == ROUNDS

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "fedcore.cli", "run", str(config), "--out", str(run_dir), "--progress", "plain"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(rows_of(run_dir)) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed; give it more work"
    done = len(rows_of(run_dir))
    assert 4 <= done < ROUNDS
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "running"  # killed: nobody wrote "finished" or "failed"

    checkpoints = sorted(p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("round-"))
    newest = checkpoints[-1]
    tensors = newest / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-7])  # a torn write

    resume = [sys.executable, "-m", "fedcore.cli", "run", "--resume", str(run_dir), "--progress", "plain"]
    result = subprocess.run(resume, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"checkpoint skipped: {newest.name}" in result.stderr
    assert f"resumed from {checkpoints[-2].name}" in result.stderr
    assert comparable(rows_of(run_dir)) == comparable(expected)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["resumed_from"] == checkpoints[-2].name
    final, ref = load_file(str(run_dir / "model.safetensors")), load_file(str(reference / "model.safetensors"))
    assert final.keys() == ref.keys() and all(torch.equal(final[k], ref[k]) for k in ref)
