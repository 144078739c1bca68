"""The plugin's examples/cos2p.toml: plans, and a shortened run under semi-async finishes with the Co-S2P metrics
in its rows."""
from pathlib import Path

import pytest

from fedcore.experiment import load_config, materialize, plan, run_experiment

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cos2p.toml"


@pytest.mark.slow
def test_the_example_runs_under_semi_async_with_ru_busy_fraction_and_staleness(tmp_path):
    config = load_config(EXAMPLE, ["rounds=3"])
    assert config["pipeline"]["schedule"]["name"] == "semi-async"
    outcome = run_experiment(materialize(plan(config)), out=tmp_path / "run", progress="none")
    assert outcome.state == "finished"
    rows = outcome.rows
    assert len(rows) == 3 and all(0 < r["ru"] <= 1 and 0 < r["utilisation"] <= 1 for r in rows)
    assert all(any(k.startswith("agg_staleness_") for k in r) for r in rows)
    assert rows[-1]["test_accuracy"] > 0.15  # above chance (0.1) after three rounds of 10-class patterns
