"""``target_epsilon`` ends the run before the budget is exceeded, says why, and a resume stays finished."""
import json

import pytest

from fedcore.cli import main
from fedcore_dp import Event, epsilon

CONFIG = """
name = "dp-budget"
seed = 0
rounds = 12
num_clients = 4
dataset = { name = "synthetic", n = 64, n_test = 32, num_classes = 4 }
model = { name = "tiny-mlp" }

[pipeline]
schedule = { name = "uniform", fraction = 0.5 }
aggregate = { name = "fedavg", weighting = "uniform" }
plugins = [{ name = "dp-fedavg", noise_multiplier = 1.0, clip = 0.5, target_epsilon = 7.0 }]

[output]
save_model = false
"""


@pytest.fixture(scope="module")
def spent_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    (root / "dp.toml").write_text(CONFIG)
    assert main(["run", str(root / "dp.toml"), "--out", str(root / "run"), "--progress", "none"]) == 0
    return root / "run"


def rows_of(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_run_stops_before_the_budget_and_says_why(spent_run, capsys):
    rows = rows_of(spent_run)
    status = json.loads((spent_run / "status.json").read_text())
    assert status["state"] == "finished" and "privacy budget spent" in status["stopped"]
    assert 1 < len(rows) < 12                                   # stopped early, after some rounds (3)
    eps = [r["dp_epsilon"] for r in rows]
    assert eps == sorted(eps) and eps[-1] <= 7.0                 # never past the target
    assert f"after {len(rows)} aggregations" in status["stopped"]
    # at the budget, not before it: 2 of 4 clients a round (q = 0.5), z = 1; one more aggregation would spend more
    spent = [Event(q=0.5, z=1.0, count=len(rows))]
    assert eps[-1] == pytest.approx(epsilon(spent, 1e-5, "rdp"), rel=1e-9)
    assert epsilon([Event(q=0.5, z=1.0, count=len(rows) + 1)], 1e-5, "rdp") > 7.0


def test_a_resume_of_the_spent_run_stays_finished(spent_run, capsys):
    before = rows_of(spent_run)
    assert main(["run", "--resume", str(spent_run), "--progress", "none"]) == 0
    out = capsys.readouterr().out
    assert "already finished" in out and "stopped early: privacy budget spent" in out
    assert rows_of(spent_run) == before


def test_the_report_shows_epsilon_and_why_the_run_stopped(spent_run, capsys):
    assert main(["report", str(spent_run), "--out", str(spent_run / "report")]) == 0
    assert "ε (δ)" in capsys.readouterr().out
    summary = json.loads((spent_run / "report" / "summary.json").read_text())[0]
    assert summary["dp_epsilon"] == rows_of(spent_run)[-1]["dp_epsilon"] and summary["dp_delta"] == 1e-5
    assert summary["stopped"].startswith("privacy budget spent")


def test_a_run_killed_after_its_last_checkpoint_stops_again_on_resume(spent_run, capsys):
    # as if killed between the last checkpoint and the final status: the stash carries the spent budget
    status_path = spent_run / "status.json"
    status = json.loads(status_path.read_text())
    status.update(state="interrupted")
    status.pop("stopped")
    status_path.write_text(json.dumps(status))
    before = rows_of(spent_run)
    assert main(["run", "--resume", str(spent_run), "--progress", "none"]) == 0
    assert "stopped early: privacy budget spent" in capsys.readouterr().out
    assert rows_of(spent_run) == before                           # no further round ran
    status = json.loads(status_path.read_text())
    assert status["state"] == "finished" and "privacy budget spent" in status["stopped"]
