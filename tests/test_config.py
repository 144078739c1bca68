"""Experiment configs: reading TOML, --set overrides, validation errors that name the key, and planning by name."""
from pathlib import Path

import pytest

from fedcore.errors import ConfigError
from fedcore.experiment import load_config, plan
from fedcore.experiment.build import materialize
from fedcore.experiment.config import apply_set, parse_set, register_table, validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

BASE = """
name = "tiny"
rounds = 2
num_clients = 3
dataset = { name = "synthetic", n = 96, n_test = 32 }
model = "tiny-mlp"

[pipeline]
partition = "iid"
local_update = { name = "sgd", lr = 0.1 }
"""


def write(tmp_path, text, name="c.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message  # one line
    return message


def test_defaults_are_filled_and_name_comes_from_the_file(tmp_path):
    cfg = load_config(write(tmp_path, BASE.replace('name = "tiny"\n', ""), "my-exp.toml"))
    assert cfg["name"] == "my-exp"
    assert cfg["seed"] == 0 and cfg["eval_every"] == 1 and cfg["threads"] == 1
    assert cfg["executor"] == "inline"
    assert cfg["checkpoint"] == {"every": 1, "keep": 2}
    assert cfg["output"] == {"tensorboard": False, "save_model": True, "client_metrics": False}


@pytest.mark.parametrize("text, expected", [
    ("rounds=5", (["rounds"], 5)),
    ("pipeline.local_update.lr=0.2", (["pipeline", "local_update", "lr"], 0.2)),
    ("dataset.name=digits", (["dataset", "name"], "digits")),           # a bare word is a string
    ('name="a b"', (["name"], "a b")),
    ("pipeline.partition={name='dirichlet', alpha=0.3}",
     (["pipeline", "partition"], {"name": "dirichlet", "alpha": 0.3})),
    ("output.tensorboard=true", (["output", "tensorboard"], True)),
    ("x.y=[1, 2]", (["x", "y"], [1, 2])),
])
def test_set_values_are_toml(text, expected):
    assert parse_set(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("rounds", "expected KEY=VALUE"),
    ("rounds=", "no value"),
    ("rounds=[1, 2", "not valid TOML"),
    ("=3", "expected KEY=VALUE"),
])
def test_set_that_does_not_parse_is_one_clear_line(text, fragment):
    assert fragment in error_of(parse_set, text)


def test_set_under_a_component_given_by_name_turns_it_into_a_table():
    cfg = {"pipeline": {"local_update": "sgd", "plugins": [{"name": "x", "k": 1}]}}
    apply_set(cfg, "pipeline.local_update.lr=0.5")
    apply_set(cfg, "pipeline.plugins.0.k=2")
    assert cfg["pipeline"]["local_update"] == {"name": "sgd", "lr": 0.5}
    assert cfg["pipeline"]["plugins"][0]["k"] == 2
    assert "not an index" in error_of(apply_set, cfg, "pipeline.plugins.3.k=2")


def test_set_overrides_apply_in_order(tmp_path):
    cfg = load_config(write(tmp_path, BASE), ["rounds=7", "rounds=4", "pipeline.local_update.epochs=2"])
    assert cfg["rounds"] == 4
    assert cfg["pipeline"]["local_update"] == {"name": "sgd", "lr": 0.1, "epochs": 2}


@pytest.mark.parametrize("sets, fragment", [
    (["roundz=3"], "unknown key 'roundz'; allowed: name, seed, rounds"),
    (["rounds='ten'"], "rounds = 'ten' has type string; expected integer"),
    (["rounds=true"], "rounds = True has type boolean; expected integer"),
    (["num_clients=0"], "num_clients = 0 is out of range; must be >= 1"),
    (["checkpoint.evry=2"], "checkpoint: unknown key 'evry'; allowed: every, keep"),
    (["output.tensorboard=1"], "output.tensorboard = 1 has type integer; expected boolean"),
    (["model={size=3}"], "model: a table needs a 'name' key"),
])
def test_bad_values_name_the_key_and_what_is_allowed(tmp_path, sets, fragment):
    assert fragment in error_of(load_config, write(tmp_path, BASE), sets)


def test_missing_required_key_and_missing_file(tmp_path):
    assert "missing required key 'rounds'" in error_of(load_config, write(tmp_path, BASE.replace("rounds = 2\n", "")))
    assert "does not exist" in error_of(load_config, tmp_path / "nope.toml")
    assert "not valid TOML" in error_of(load_config, write(tmp_path, "rounds = = 3"))


@pytest.mark.parametrize("sets, fragment", [
    (["pipeline.aggregate=fedavgg"], "unknown component 'fedavgg' for slot 'aggregate' (did you mean fedavg"),
    (["pipeline.local_update.lrr=0.1"], "unknown setting(s) ['lrr']"),
    (["pipeline.local_update.lr=-1.0"], "out of range"),
    (["pipeline.aggregate=sgd"], "does not provide the 'aggregate' slot"),
    (["pipeline.sheduler=uniform"], "unknown pipeline key(s) ['sheduler']"),
    (["dataset.name=digitz"], "unknown dataset 'digitz' (did you mean digits"),
    (["dataset.nn=3"], "dataset synthetic: unknown setting 'nn'; allowed: n, n_test, noise, num_classes, seed"),
    (["dataset.n='many'"], "dataset synthetic.n = 'many' has type string; expected integer"),
    (["model=resnet"], "unknown model 'resnet'"),
    (["executor=thread"], "executor = 'thread': unknown executor 'thread' (did you mean threads?); choose one of: "
                          "inline, ray, threads"),
    (["clock.speed=2.0"], "clock: unknown setting 'speed'"),
    (["faults.dropout_during='often'"], "faults.dropout_during = 'often' has type string"),
])
def test_plan_reports_unknown_names_and_settings_before_any_work(tmp_path, sets, fragment):
    path = write(tmp_path, BASE)
    message = error_of(lambda: plan(load_config(path, sets)))
    assert fragment in message, message


def test_resolved_config_fills_every_slot_with_its_settings(tmp_path):
    p = plan(load_config(write(tmp_path, BASE)))
    pipe = p.resolved["pipeline"]
    assert pipe["partition"] == {"name": "iid"}
    assert pipe["local_update"]["lr"] == 0.1 and pipe["local_update"]["epochs"] == 1
    assert pipe["aggregate"]["name"] == "fedavg"  # a default, written out
    assert set(pipe) >= {"partition", "schedule", "split", "select", "local_update", "aggregate", "evaluate"}
    assert p.resolved["dataset"]["noise"] == 0.5  # factory defaults are written too
    # the resolved config plans to the same fingerprint
    again = plan(validate(p.resolved))
    assert again.fingerprint == p.fingerprint
    # the name, executor and output options do not change what a run computes
    other = plan(load_config(write(tmp_path, BASE), ["name=other", "output.save_model=false", "checkpoint.every=3"]))
    assert other.fingerprint == p.fingerprint
    assert plan(load_config(write(tmp_path, BASE), ["seed=1"])).fingerprint != p.fingerprint


def test_materialize_defaults_num_classes_to_the_dataset_and_reports_missing_files(tmp_path):
    m = materialize(plan(load_config(write(tmp_path, BASE), ["dataset.num_classes=3"])))
    assert m.resolved["model"]["num_classes"] == 3
    assert m.model(m.train.x[:2]).shape == (2, 3)
    cfg = load_config(write(tmp_path, BASE), [f"dataset={{name='image-folder', train='{tmp_path / 'missing'}'}}"])
    assert "missing" in error_of(materialize, plan(cfg))
    too_many = load_config(write(tmp_path, BASE), ["num_clients=500"])
    assert "more than the 96 training samples" in error_of(materialize, plan(too_many))


def test_extension_tables_extend_the_schema(tmp_path):
    seen = {}
    register_table("test-extension", help="for this test", check=lambda v, where: seen.setdefault("checked", v),
                   build=lambda v, ctx: {})
    try:
        cfg = load_config(write(tmp_path, BASE + '\n["test-extension"]\nlevel = 3\n'))
        assert cfg["test-extension"] == {"level": 3} and seen["checked"] == {"level": 3}
    finally:
        from fedcore.experiment import config

        config.TOP_LEVEL.pop("test-extension")
        config.EXTENSIONS.pop("test-extension")


def test_runtime_tables_build_the_clock_profiles_and_faults(tmp_path):
    text = BASE + '\n[clock]\ndefault_profile = "phone"\n[profiles]\nweights = { watch = 1, phone = 2 }\n' \
                  '[faults]\ndropout_during = 0.1\n'
    m = materialize(plan(load_config(write(tmp_path, text))))
    from fedcore.runtime import Faults, ProfileAssignment, SimClock

    assert isinstance(m.run_kwargs["clock"], SimClock)
    assert isinstance(m.run_kwargs["profiles"], ProfileAssignment)
    assert m.run_kwargs["faults"] == Faults(dropout_during=0.1) or m.run_kwargs["faults"].dropout_during == 0.1


REPRO_CONFIGS = sorted(EXAMPLES.parent.glob("plugins/*/repro/*.toml"))  # each method's sweeps, in its distribution
PLUGIN_EXAMPLES = sorted(EXAMPLES.parent.glob("plugins/*/examples/*.toml"))  # each method's quickstart config


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")) + PLUGIN_EXAMPLES + REPRO_CONFIGS,
                         ids=lambda p: str(p.relative_to(EXAMPLES.parent)))
def test_every_example_config_plans(path):
    from fedcore.experiment.config import read_toml
    from fedcore.experiment.sweep_spec import load_sweep_spec

    if "sweep" in read_toml(path):  # a sweep config: every cell must plan
        cells = load_sweep_spec(path).cells()
        assert cells and all(c.config["rounds"] >= 1 for c in cells)
        return
    p = plan(load_config(path))
    assert p.resolved["rounds"] >= 1
