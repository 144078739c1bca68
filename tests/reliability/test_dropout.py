"""Clients dropping out mid-round at 30 / 70 / 100 %: partial work is a result, no work at all is a failed run."""
import json

from battery import config_text, rows_of, status_of
import pytest

from fedcore.cli import main


@pytest.mark.parametrize("schedule", ["sync", "buffered"])
@pytest.mark.parametrize("p", [0.3, 0.7])
def test_partial_dropout_finishes_and_every_row_says_what_dropped(tmp_path, capsys, p, schedule):
    config = tmp_path / "c.toml"
    config.write_text(config_text(schedule, rounds=6, epochs=1, faults=f"dropout_during = {p}"))
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out), "--progress", "none"]) == 0
    capsys.readouterr()
    rows = rows_of(out)
    assert status_of(out)["state"] == "finished" and len(rows) == 6
    dropped = sum(len(r.get("dropout", [])) for r in rows)
    arrived = sum(len(r["clients"]) for r in rows)
    assert dropped > 0 and arrived > 0
    assert 0.5 * p < dropped / (dropped + arrived) < min(1.0, 1.6 * p)  # about the asked rate
    for r in rows:  # a round is failed exactly when nothing reached aggregation
        assert ("round_failed" in r) == (not r["clients"])


@pytest.mark.parametrize("schedule", ["sync", "semi-async", "buffered", "async"])
def test_total_dropout_is_a_failed_run_exit_1_with_every_round_reported(tmp_path, capsys, schedule):
    """Every round of a two-round run is reported, none applies an update, and the run fails (exit 1)."""
    config = tmp_path / "c.toml"
    config.write_text(config_text(schedule, rounds=2, epochs=1, faults="dropout_during = 1.0"))
    out = tmp_path / "run"
    rc = main(["run", str(config), "--out", str(out), "--progress", "plain"])
    printed, err = capsys.readouterr()
    assert rc == 1
    status = status_of(out)
    assert status["state"] == "failed" and status["error"].startswith("no round of 2 applied a client update")
    assert "fedcore: error: the run failed: no round of 2 applied a client update" in err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["clients"] == [] and r["dropout"] for r in rows)
    assert all(r["round_failed"].startswith("no client update reached aggregation (dropout") for r in rows)
    progress = [line for line in (printed + err).splitlines() if "] round " in line]
    assert len(progress) == 2 and all("clients 0" in line and "round failed: no client update reached aggregation"
                                      in line for line in progress)
