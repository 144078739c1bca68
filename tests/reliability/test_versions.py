"""Provenance on resume (issue 29, item 4): a resume under other fedcore / torch / plugin versions warns in one line
and appends the segment's versions to ``manifest.json`` (the earlier segments' stay); ``--strict-versions`` refuses
any difference with exit 2 and writes nothing. In-process: the earlier segment's versions are edited in its manifest,
as if another installation had written it."""
import json

from battery import comparable, config_text, rows_of, status_of
from battery import crashed_run as battery_crashed_run
import torch

import fedcore
from fedcore.cli import main

ROUNDS = 3


def crashed_run(tmp_path):
    """A sync run stopped in-process right after round 1's row (``battery.crashed_run``)."""
    config = tmp_path / "c.toml"
    config.write_text(config_text("sync", rounds=ROUNDS, epochs=1))
    return config, battery_crashed_run(config, tmp_path / "run", 1)


def test_a_resume_under_other_versions_warns_and_keeps_every_segments_versions(tmp_path, capsys):
    config, run_dir = crashed_run(tmp_path)
    ref = tmp_path / "reference"
    assert main(["run", str(config), "--out", str(ref), "--progress", "none"]) == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [s["from_round"] for s in manifest["segments"]] == [0]
    old = manifest["segments"][0]["versions"]
    plugin = next(iter(old["plugins"]))
    old.update(torch="0.0.1", fedcore="0.0.0")
    old["plugins"][plugin]["version"] = "9.9.9"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    edited = (run_dir / "manifest.json").read_bytes()
    capsys.readouterr()

    rc = main(["run", "--resume", str(run_dir), "--strict-versions", "--progress", "none"])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("fedcore: error: "), err
    assert f"torch 0.0.1 -> {torch.__version__}" in lines[0] and f"fedcore 0.0.0 -> {fedcore.__version__}" in lines[0]
    assert f"plugin {plugin} 9.9.9 -> " in lines[0]
    assert (run_dir / "manifest.json").read_bytes() == edited and status_of(run_dir)["state"] != "finished"

    assert main(["run", "--resume", str(run_dir), "--progress", "none"]) == 0
    _, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"torch 0.0.1 -> {torch.__version__}" in warnings[0], err
    segments = json.loads((run_dir / "manifest.json").read_text())["segments"]
    assert [s["versions"]["torch"] for s in segments] == ["0.0.1", torch.__version__]  # appended, not overwritten
    assert segments[1]["from_round"] > 0 and segments[1]["resumed_from"]
    assert comparable(rows_of(run_dir)) == comparable(rows_of(ref))


def test_a_resume_under_the_same_versions_says_nothing_and_strict_accepts_it(tmp_path, capsys):
    _, run_dir = crashed_run(tmp_path)
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--strict-versions", "--progress", "none"]) == 0
    _, err = capsys.readouterr()
    assert "warning" not in err
    segments = json.loads((run_dir / "manifest.json").read_text())["segments"]
    assert len(segments) == 2 and segments[0]["versions"] == segments[1]["versions"]
