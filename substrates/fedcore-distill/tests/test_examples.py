"""The quickstart configs of fedcore-fedvkd and fedcore-fedgkt (each plugin's ``examples/NAME.toml``) run through the
CLI (one round here; the full runs take ~1 min)."""
import json
from pathlib import Path

import pytest

from fedcore.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["fedvkd", "fedgkt"])
@pytest.mark.slow
def test_example_runs_through_the_cli(name, tmp_path):
    out = tmp_path / name
    config = ROOT / "plugins" / f"fedcore-{name}" / "examples" / f"{name}.toml"
    code = main(["run", str(config), "--set", "rounds=1", "--set", "dataset.n=200", "--out", str(out),
                 "--progress", "none"])
    assert code in (0, None)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["round"] == 0 and 0.0 <= rows[-1]["test_accuracy"] <= 1.0
    assert rows[-1]["bytes_up"] > 0 and "edge_accuracy" in rows[-1]
