"""repro/tables.py on a small real sweep: each mode paired with its own SL, the time-to-target column read from the
histories' simulated time."""
from __future__ import annotations

import json
import math
from pathlib import Path
import runpy
import statistics
import sys

import pytest

from fedcore.experiment import run_sweep, sweep_statistics

REPRO = Path(__file__).resolve().parents[1] / "repro"
SWEEP = """
name = "tl-tables"
recipe = "sl-round-robin"
rounds = 2
num_clients = 4
threads = 1
dataset = "digits"
model = { name = "micro-cnn", width = 4 }
profiles = ["tl-low", "tl-low", "tl-medium", "tl-high"]

[pipeline]
split = { batch_size = 16, server_lr = 0.03 }
cohort = { lr = 0.03 }

[sweep]
seeds = 2
baseline = "sl"

[sweep.variants]
sl = {}
tl = { recipe = "tree-learning" }
vsl = { recipe = "sl-sync", "pipeline.partition" = "tl-vertical", "pipeline.split.mode" = "vertical" }
vtl = { recipe = "tree-learning-vertical" }
"""


def _history(cell: Path) -> list[tuple[float, float]]:
    """(cumulative simulated seconds, accuracy) per round, read straight from metrics.jsonl."""
    out, clock = [], 0.0
    for line in (cell / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "agg_tl_sim_s" in row and "test_accuracy" in row:
            clock += row["agg_tl_sim_s"]
            out.append((clock, row["test_accuracy"]))
    return out


def _expected_time_cell(sweep: Path, setting: str, base: str) -> str:
    target = 0.95 * statistics.mean(_history(sweep / base / f"seed-{s}")[-1][1] for s in (0, 1))
    times = [next((t for t, a in _history(sweep / setting / f"seed-{s}") if a >= target), math.inf) for s in (0, 1)]
    reached = [t for t in times if math.isfinite(t)]
    if len(reached) < 2:
        return f"reached in {len(reached)}/2"
    return f"{statistics.mean(reached):.3f} ± {statistics.stdev(reached):.3f}"


@pytest.mark.slow
def test_tables_pair_each_mode_with_its_sl_and_time_the_target(tmp_path, monkeypatch):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP)
    out = tmp_path / "s"
    run_sweep(config, out=out)
    readme = tmp_path / "README.md"
    readme.write_text("# tl\n<!-- generated:treelearning-parity -->\nold\n"
                      "<!-- /generated:treelearning-parity -->\nend\n")
    # `python repro/tables.py OUT --write README` from tmp_path, run in this process (no interpreter start-up)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(REPRO / "tables.py"), str(out), "--write", str(readme)])
    runpy.run_path(str(REPRO / "tables.py"), run_name="__main__")
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- /generated:treelearning-parity -->\nend\n")
    rows = {line.split(" | ")[1]: line.split(" | ") for line in text.splitlines() if line.startswith("| horizontal")
            or line.startswith("| vertical")}
    assert sorted(rows) == ["sl", "tl", "vsl", "vtl"]
    stats = sweep_statistics(out)
    for setting, base in (("tl", "sl"), ("vtl", "vsl")):  # vertical TL against vertical SL, not the sweep's `sl`
        assert rows[setting][5].startswith(f"{stats.compare(setting, base).mean_diff:+.3f}")
        assert rows[setting][7] == _expected_time_cell(out, setting, base)
    assert rows["vsl"][5] == "—" and rows["vsl"][7] == _expected_time_cell(out, "vsl", "vsl")
    assert (tmp_path / "results" / "treelearning-parity" / "accuracy_vs_sim_time.png").stat().st_size > 0
