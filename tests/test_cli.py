"""The ``fedcore`` command: run, describe, plugins; bad input; run directories never overwritten silently."""
import io
import json
import logging
import sys
import textwrap

import pytest
import torch

import fedcore
from fedcore.cli import main
from fedcore.experiment.progress import RunProgress

CONFIG = textwrap.dedent("""
    name = "cli-tiny"
    rounds = 3
    num_clients = 3
    seed = 2
    dataset = { name = "synthetic", n = 96, n_test = 48 }
    model = "tiny-mlp"

    [pipeline]
    partition = { name = "dirichlet", alpha = 1.0, min_size = 5 }
    local_update = { name = "sgd", lr = 0.1, momentum = 0.9 }
    """)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def comparable(rows):
    return [{k: v for k, v in r.items() if "wall" not in k} for r in rows]


def read_rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("extra, fragment", [
    (["--set", "roundz=3"], "unknown key 'roundz'; allowed:"),
    (["--set", "pipeline.aggregate=fedavgg"], "unknown component 'fedavgg' for slot 'aggregate' (did you mean fedavg"),
    (["--set", "rounds='three'"], "rounds = 'three' has type string; expected integer"),
    (["--set", "rounds=[1,"], "is not valid TOML"),
    (["--set", "dataset={name='image-folder', train='/nonexistent/x'}"], "/nonexistent/x"),
    (["--set", "num_clients=200"], "num_clients = 200 is more than the 96 training samples"),
    # refused by the partitioner at set-up
    (["--set", "pipeline.partition.min_size=90"], "min_size=90 needs 270 samples"),
])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(capsys, tmp_path, config, extra, fragment):
    out_dir = tmp_path / "run"
    rc, out, err = run_cli(capsys, "run", config, "--out", out_dir, "--progress", "none", *extra)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedcore: error: ") and fragment in lines[0], err
    assert not out_dir.exists()


def test_missing_config_and_unknown_option(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "run", tmp_path / "nope.toml")
    assert rc == 2 and "config file" in err and "does not exist" in err
    rc, _, err = run_cli(capsys, "run", "--frobnicate")
    assert rc == 2 and err.startswith("fedcore: error: ") and "--frobnicate" in err
    rc, _, err = run_cli(capsys, "run", "--resume", tmp_path / "missing")
    assert rc == 2 and "no such directory" in err


def test_run_fills_the_run_directory_and_its_config_repeats_the_run(capsys, tmp_path, config):
    out_dir = tmp_path / "run"
    rc, out, err = run_cli(capsys, "run", config, "--out", out_dir, "--progress", "plain",
                           "--set", "output.tensorboard=true")
    assert rc == 0, err
    assert f"run directory: {out_dir}" in out and "finished 3 rounds" in out
    assert "[cli-tiny] round 3/3" in err and "eta" in err  # plain progress lines off a terminal
    rows = read_rows(out_dir)
    assert [r["round"] for r in rows] == [0, 1, 2] and all("test_accuracy" in r for r in rows)
    status = json.loads((out_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["rounds_done"] == 3
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["seed"] == 2 and manifest["pipeline"]["slots"]["partition"] == "dirichlet"
    assert manifest["versions"]["torch"] == torch.__version__ and "builtin" in manifest["versions"]["plugins"]
    from safetensors.torch import load_file

    state = load_file(str(out_dir / "model.safetensors"))
    model = fedcore.plugins.lookup("tiny-mlp", kind="model").obj(num_classes=4)
    model.load_state_dict(state)  # the final model loads into the architecture named in the config
    assert list((out_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert [p.name for p in sorted((out_dir / "checkpoints").iterdir())] == [
        "history.jsonl", "ledger.jsonl", "round-000002", "round-000003"]  # the journals the checkpoints refer to

    again = tmp_path / "again"
    rc, _, _ = run_cli(capsys, "run", out_dir / "config.toml", "--out", again, "--progress", "none")
    assert rc == 0 and comparable(read_rows(again)) == comparable(rows)


@pytest.mark.parametrize("on_cpu", ["vectorise", "auto"])
def test_run_vectorises_when_asked_and_progress_still_counts_every_client(capsys, tmp_path, config, monkeypatch,
                                                                         caplog, on_cpu):
    """The progress display observes the clients without wrapping the local update, so the cohort vectorises (or,
    under auto, does what the probe chose and records it in the manifest); either way every client is counted."""
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    counted = []
    finished = RunProgress.client_finished

    def counting(self):
        counted.append(self.clients_done)
        finished(self)

    monkeypatch.setattr(RunProgress, "client_finished", counting)
    out_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        rc, _, err = run_cli(capsys, "run", config, "--out", out_dir, "--progress", "plain",
                             "--set", f'pipeline.cohort={{name="vectorised", on_cpu="{on_cpu}"}}')
    assert rc == 0, err
    said = [r.getMessage() for r in caplog.records if r.name == "fedcore.cohort"]
    assert not any("wrapped by" in line for line in said), said
    manifest = json.loads((out_dir / "manifest.json").read_text())
    vectorised = [r["cohort_vectorised"] for r in read_rows(out_dir)]
    if on_cpu == "vectorise":
        assert vectorised == [3.0, 3.0, 3.0] and not said  # every client of every round in one batch
        assert "decided" not in manifest
    else:
        (record,) = manifest["decided"]["vectorised-cohort"].values()
        assert record["by"] == "probe" and vectorised == [3.0 if record["choice"] == "vectorise" else 0.0] * 3
    assert len(counted) == 9  # 3 clients x 3 rounds, counted by the display as they finished


def test_a_run_directory_is_never_overwritten_silently(capsys, tmp_path, config):
    out_dir = tmp_path / "run"
    assert run_cli(capsys, "run", config, "--out", out_dir, "--progress", "none")[0] == 0
    before = (out_dir / "metrics.jsonl").read_bytes()
    rc, _, err = run_cli(capsys, "run", config, "--out", out_dir, "--progress", "none")
    assert rc == 2 and "already holds this run (finished, 3 rounds done)" in err and "--overwrite" in err
    rc, _, err = run_cli(capsys, "run", config, "--out", out_dir, "--progress", "none", "--set", "rounds=4")
    assert rc == 2 and "holds a different run" in err and "rounds: 3 -> 4" in err
    assert (out_dir / "metrics.jsonl").read_bytes() == before
    rc, _, err = run_cli(capsys, "run", "--resume", out_dir, config, "--set", "seed=5")
    assert rc == 2 and "holds a different run" in err and "seed: 2 -> 5" in err
    rc, out, _ = run_cli(capsys, "run", "--resume", out_dir)
    assert rc == 0 and "already finished" in out
    other = tmp_path / "not-a-run"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    rc, _, err = run_cli(capsys, "run", config, "--out", other, "--overwrite", "--progress", "none")
    assert rc == 2 and "not a fedcore run directory" in err and (other / "notes.txt").exists()
    rc, _, _ = run_cli(capsys, "run", config, "--out", out_dir, "--overwrite", "--progress", "none",
                       "--set", "rounds=2")
    assert rc == 0 and len(read_rows(out_dir)) == 2


def test_default_out_is_numbered_never_reused(capsys, tmp_path, config, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for expected in ("runs/cli-tiny", "runs/cli-tiny-2"):
        rc, out, _ = run_cli(capsys, "run", config, "--progress", "none", "--set", "rounds=1")
        assert rc == 0 and f"run directory: {expected}" in out


def test_describe_resolves_without_running(capsys, tmp_path, config, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run_cli(capsys, "describe", config, "--set", "pipeline.local_update.epochs=3")
    assert rc == 0
    assert "[pipeline.local_update]" in out and "epochs = 3" in out and "[pipeline.aggregate]" in out
    assert "fedavg" in out and "(default)" in out and "global-eval" in out
    rc, out, _ = run_cli(capsys, "describe", config, "--json")
    doc = json.loads(out)
    assert doc["pipeline"]["slots"]["local_update"] == "sgd" and doc["config"]["rounds"] == 3
    assert not (tmp_path / "runs").exists()


def test_plugins_lists_components_slots_and_failures(capsys, tmp_path, monkeypatch):
    # a real (if tiny) distribution on sys.path whose entry point fails to import
    dist = tmp_path / "fedcore_brokentest-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fedcore-brokentest\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedcore]\nbrokentest = fedcore_brokentest_mod\n")
    (tmp_path / "fedcore_brokentest_mod.py").write_text("raise ImportError('needs libfoo 2.0')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fedcore.plugins.refresh()
    try:
        rc, out, _ = run_cli(capsys, "plugins")
    finally:
        monkeypatch.undo()
        fedcore.plugins.refresh()
    assert rc == 0
    assert "builtin" in out and "fedavg (aggregate)" in out and "dirichlet (partition)" in out
    assert "dataset digits" in out
    assert "brokentest" in out and "failed" in out and "needs libfoo 2.0" in out


def test_rich_progress_renders_and_degrades(tmp_path):
    stream = io.StringIO()
    live = RunProgress(name="p", rounds=2, mode="rich", stream=stream)
    live.start()
    live.round_started(0)
    live.client_finished()
    live.round_done({"round": 0, "clients": [0], "test_accuracy": 0.5, "bytes_up_total": 10, "bytes_down_total": 10,
                     "split_stale_applied": 2, "split_stale_dropped": 1, "share_changed": [{"client": 3}]})
    live.note("a note")
    live.close()
    text = stream.getvalue()
    assert "a note" in text and "1/2" in text
    assert "stale sessions 2 applied 1 dropped" in text and "share changed: 1 dropped" in text  # the live view too
    plain = io.StringIO()
    auto = RunProgress(name="p", rounds=2, mode="auto", stream=plain)  # StringIO is not a terminal
    assert auto.mode == "plain"
    auto.start()
    auto.round_done({"round": 0, "clients": [0, 1], "test_accuracy": 0.5, "round_wall_s": 0.1})
    assert "round 1/2  clients 2  test_accuracy 0.5000" in plain.getvalue()
    assert "0.10 s/round  eta 0.1s" in plain.getvalue()
    auto.round_done({"round": 1, "clients": [0, 1], "round_wall_s": 0.3})
    assert "round 2/2" in plain.getvalue() and "0.20 s/round" in plain.getvalue()  # the mean of every round so far


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("fedcore") == "fedcore.cli:console"
    assert sys.executable
