"""``fedcore plan`` / ``fedcore run --dry-run`` / ``fedcore run --smoke``: output, JSON, the [plan] table, errors."""
from __future__ import annotations

import json
import textwrap

import pytest

from fedcore.cli import main

CONFIG = textwrap.dedent("""
    name = "plan-tiny"
    rounds = 3
    num_clients = 6
    seed = 1
    dataset = { name = "synthetic", n = 120, n_test = 40 }
    model = "tiny-mlp"

    [pipeline]
    partition = { name = "dirichlet", alpha = 1.0, min_size = 5 }
    schedule = { name = "uniform", fraction = 0.5 }
    local_update = { name = "sgd", lr = 0.1, epochs = 2, batch_size = 8 }

    [clock]
    default_profile = "watch"
    """)

ABSENT = textwrap.dedent("""
    name = "absent-data"
    rounds = 2
    num_clients = 20
    dataset = { name = "image-folder", train = "/nonexistent/cifar10/train", size = 16 }
    model = { name = "micro-cnn", in_chans = 3 }

    [pipeline]
    partition = { name = "dirichlet", alpha = 0.3, min_size = 10 }
    """)

SHAPE = textwrap.dedent("""
    [plan]
    train = 5000
    test = 1000
    classes = 10
    input = [3, 16, 16]
    """)


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def test_plan_prints_the_round_and_dry_run_is_the_same(capsys, config, tmp_path):
    rc, out, err = run_cli(capsys, "plan", config)
    assert rc == 0, err
    assert "plan of plan-tiny, round 0" in out and "3 of 6 clients dispatched" in out
    assert "watch" in out and "round 0 up: weights" in out
    rc2, again, _ = run_cli(capsys, "run", config, "--dry-run")
    assert rc2 == 0 and again == out
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_plan_json_has_every_client(capsys, config):
    rc, out, err = run_cli(capsys, "plan", config, "--json", "--set", "num_clients=4")
    assert rc == 0, err
    data = json.loads(out)
    assert [c["client"] for c in data["clients"]] == [0, 1, 2, 3]
    c = data["clients"][0]
    assert c["profile"] == "watch" and c["steps"] == 2 * -(-c["selected"] // 8)
    assert c["bytes"]["down"]["weights"] == c["bytes"]["up"]["weights"] == c["state_bytes"]
    assert set(c["memory"]) == {"params", "grads", "optimizer", "activations"}
    assert data["round_bytes"]["up"]["weights"] == sum(x["bytes"]["up"]["weights"] for x in data["clients"]
                                                       if x["client"] in data["dispatched"])


def test_plan_without_the_data_needs_its_shape(capsys, tmp_path):
    path = tmp_path / "absent.toml"
    path.write_text(ABSENT)
    rc, out, err = run_cli(capsys, "plan", path)
    assert rc == 2 and err.count("\n") == 1
    assert "/nonexistent/cifar10/train" in err and "[plan] table" in err
    path.write_text(ABSENT + SHAPE)
    rc, out, err = run_cli(capsys, "plan", path, "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["data"]["synthetic_labels"] and data["data"]["train"] == 5000
    sizes = [c["samples"] for c in data["clients"]]
    assert sum(sizes) == 5000 and min(sizes) >= 10 and max(sizes) > 2 * min(sizes)  # Dirichlet(0.3): skewed sizes


@pytest.mark.parametrize("table, fragment", [
    ("[plan]\ntrain = 10\nclasses = 2\ninput = [1, 8, 8]\nsize = 3\n", "plan: unknown key 'size'; allowed:"),
    ("[plan]\ntrain = 10\nclasses = 2\ninput = [1, 0]\n", "plan.input = [1, 0] must be a non-empty array"),
    ("[plan]\ntrain = 10\ninput = [1, 8, 8]\n", "plan: missing required key 'classes'"),
])
def test_bad_plan_tables_are_one_line(capsys, tmp_path, table, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(ABSENT + table)
    rc, out, err = run_cli(capsys, "plan", path)
    assert rc == 2 and fragment in err and err.count("\n") == 1


def test_plan_table_is_not_part_of_the_fingerprint(tmp_path):
    from fedcore.experiment.build import plan
    from fedcore.experiment.config import load_config

    path = tmp_path / "a.toml"
    path.write_text(ABSENT)
    before = plan(load_config(path)).fingerprint
    path.write_text(ABSENT + SHAPE)
    assert plan(load_config(path)).fingerprint == before


@pytest.mark.parametrize("argv, fragment", [
    (["--dry-run", "--smoke"], "give one"),
    (["--dry-run", "--out", "x"], "writes no run directory"),
    (["--device", "cpu"], "go with --smoke"),
    (["--json"], "go with --dry-run"),
    (["--dry-run", "--round", "7"], "--round 7: the config runs rounds 0..2"),
])
def test_run_flags_that_do_not_fit_are_one_line(capsys, config, argv, fragment):
    rc, out, err = run_cli(capsys, "run", config, *argv)
    assert rc == 2 and fragment in err


def test_smoke_runs_two_clients_one_step_and_says_what_was_scaled(capsys, config, tmp_path):
    rc, out, err = run_cli(capsys, "run", config, "--smoke", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["ok"] and data["batch"] == 2 and data["clients"] == [0, 1]
    row = data["rows"][0]
    assert row["clients"] == [0, 1] and row["num_examples"] == 4  # both clients, two samples each
    assert any("local_update.epochs: 2 -> 1" in s for s in data["scaled"])
    assert any("schedule.fraction: 0.5 -> 1.0" in s for s in data["scaled"])
    assert not (tmp_path / "runs").exists()
    rc, out, _ = run_cli(capsys, "run", config, "--smoke")
    assert rc == 0 and "smoke run of plan-tiny: passed" in out and "scaled down: rounds: 3 -> 1" in out


def test_smoke_without_the_data_uses_the_plan_table(capsys, tmp_path):
    path = tmp_path / "absent.toml"
    path.write_text(ABSENT + SHAPE)
    rc, out, err = run_cli(capsys, "run", path, "--smoke", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["ok"], data["problem"]
    assert any("5,000 train samples -> 4 of seeded noise, input 3x16x16" in s for s in data["scaled"])


def test_plan_of_a_sweep_config_plans_its_base(capsys, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(CONFIG + '\n[sweep]\nseeds = 2\n[sweep.variants]\nfast = { "pipeline.local_update.lr" = 0.5 }\n')
    rc, out, err = run_cli(capsys, "plan", path)
    assert rc == 0, err
    assert "a sweep; its base config" in err and "plan of plan-tiny" in out
