"""The plugin's examples/treelearning.toml: `fedcore run` finishes and learns, and a SIGKILL + resume equals it
(its time is the suite's `--durations` business, not an assertion: docs/testing.md)."""
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file
import torch

from fedcore.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "treelearning.toml"


def rows_of(run_dir):
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def comparable(rows):
    return [{k: v for k, v in r.items() if "wall" not in k} for r in rows]


@pytest.mark.integration
def test_the_example_runs_and_resumes_after_a_kill_to_the_same_history(tmp_path, capsys):
    reference = tmp_path / "reference"
    assert main(["run", str(EXAMPLE), "--out", str(reference), "--progress", "none"]) == 0
    capsys.readouterr()
    expected = rows_of(reference)
    assert len(expected) == 6 and expected[-1]["test_accuracy"] > 0.5
    assert all(r["agg_tl_sim_s"] > 0 for r in expected)

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "fedcore.cli", "run", str(EXAMPLE), "--out", str(run_dir), "--progress", "plain"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(rows_of(run_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert 2 <= len(rows_of(run_dir)) < 6

    capsys.readouterr()  # the resume runs in this process, as the other kill tests' resumes do (docs/testing.md)
    assert main(["run", "--resume", str(run_dir), "--progress", "plain"]) == 0
    assert "resumed from" in capsys.readouterr().err
    assert comparable(rows_of(run_dir)) == comparable(expected)
    final, ref = load_file(str(run_dir / "model.safetensors")), load_file(str(reference / "model.safetensors"))
    assert final.keys() == ref.keys() and all(torch.equal(final[k], ref[k]) for k in ref)
