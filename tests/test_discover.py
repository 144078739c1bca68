"""Discoverability: ``fedcore describe NAME``, ``python -m fedcore``, setting metadata, and unknown names that say
what to install."""
from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import attrs
import pytest

import fedcore
from fedcore.cli import main
from fedcore.errors import ConfigError, UnknownComponentError
from fedcore.settings import allowed_text, describe_settings, setting
from fedcore.testing.light_import import imported_heavy

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_describe_a_component_shows_slot_settings_and_package(capsys):
    rc, out, err = run_cli(capsys, "describe", "sgd", "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["kind"] == "component" and info["slots"] == ["local_update"]
    assert info["plugin"] == "builtin" and info["distribution"] == "fedcore" and info["version"] == fedcore.__version__
    rows = {r["name"]: r for r in info["settings"]}
    assert rows["lr"] == {"name": "lr", "type": "float", "required": False, "default": 0.05, "allowed": "> 0",
                          "help": "learning rate"}
    assert rows["optimizer"]["allowed"] == "'sgd' | 'adam'" and rows["momentum"]["allowed"] == "[0, 1)"
    rc, out, err = run_cli(capsys, "describe", "fedavg")
    assert rc == 0, err
    assert out.startswith("fedavg  component from plugin builtin (fedcore ") and "slot: aggregate" in out
    assert "weighting" in out and "'samples' | 'uniform'" in out


@pytest.mark.parametrize("name, kind, setting_name", [
    ("synthetic", "dataset", "n_test"), ("tiny-mlp", "model", "hidden"), ("ray", "executor", "num_workers"),
    ("faults", "table", "dropout_during"), ("digits", "dataset", "**kwargs"),
])
def test_describe_datasets_models_executors_and_tables(capsys, name, kind, setting_name):
    rc, out, err = run_cli(capsys, "describe", name, "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["kind"] == kind and info["distribution"] == "fedcore"
    assert setting_name in [r["name"] for r in info["settings"]]


def test_describe_unknown_name_is_one_line_with_close_matches(capsys):
    rc, out, err = run_cli(capsys, "describe", "fedavgg")
    assert rc == 2 and out == ""
    assert err.startswith("fedcore: error: unknown name 'fedavgg' (did you mean fedavg") and err.count("\n") == 1
    rc, out, err = run_cli(capsys, "describe", "fedavg", "--set", "rounds=2")
    assert rc == 2 and "--set applies to a config file" in err


@pytest.mark.integration
def test_python_dash_m_fedcore_is_the_command():
    """... and answering about one name imports every installed plugin but none of the heavy libraries (timm,
    peft, open_clip, ray, torchvision, datasets, matplotlib, ...): they load where a component is built."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDCORE_")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "fedcore", "describe", "iid", "--json"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["slots"] == ["partition"]
    assert "fedcore_distill" in proc.stderr and "fedcore_clip" in proc.stderr  # discovery imported the plugins
    assert imported_heavy(proc.stderr) == [], "registration must stay light (docs/plugins.md)"


def test_setting_metadata_gives_type_range_choices_and_help():
    @attrs.frozen(eq=False, kw_only=True)
    class Knobs:
        rate: float = setting(0.5, low=0.0, high=1.0, low_open=True, help="a rate")
        steps: int = setting(low=1, kind=int, help="required")
        mode: str = setting("a", choices=("a", "b"))
        cap: int | None = setting(None, kind=int, high=8, optional=True)
        plain: int = 3

    rows = {r["name"]: r for r in describe_settings(Knobs)}
    assert rows["rate"] == {"name": "rate", "type": "float", "required": False, "default": 0.5, "allowed": "(0, 1]",
                            "help": "a rate"}
    assert rows["steps"]["required"] and rows["steps"]["default"] is None and rows["steps"]["allowed"] == ">= 1"
    assert rows["mode"]["allowed"] == "'a' | 'b'" and rows["cap"]["type"] == "int | None"
    assert rows["cap"]["allowed"] == "<= 8" and rows["plain"] == {"name": "plain", "type": "int", "required": False,
                                                                 "default": 3, "allowed": "", "help": ""}
    assert allowed_text({"low": 0.0, "high": 1.0, "high_open": True}) == "[0, 1)"
    # the metadata is what the validator enforces
    with pytest.raises(ConfigError, match=r"Knobs.rate=0.0 is out of range; must be > 0.0"):
        Knobs(rate=0.0, steps=1)


def test_every_builtin_component_setting_has_help():
    builtin = [e for e in fedcore.list_components() if e.obj.__module__.startswith("fedcore.builtin.")]
    missing = [f"{e.name}.{row['name']}" for e in builtin for row in describe_settings(e.obj) if not row["help"]]
    assert len(builtin) >= 17
    assert missing == [], missing


# -- unknown names: only the slot's providers; first-party packages by name --------------------------------


@pytest.fixture
def catalogue_env(monkeypatch):
    """Set FEDCORE_* switches for one test; the catalogue is rebuilt before and after."""
    def set_env(**env: str) -> None:
        for key in ("FEDCORE_PLUGINS", "FEDCORE_DISABLE_PLUGIN_AUTOLOAD"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        fedcore.plugins.refresh()
    yield set_env
    monkeypatch.undo()
    fedcore.plugins.refresh()


def test_a_hidden_first_party_distribution_is_named_in_one_line(catalogue_env):
    catalogue_env(FEDCORE_PLUGINS="robust")  # the catalogue's own filter: fedcore-fedv is installed, not loaded
    with pytest.raises(UnknownComponentError) as err:
        fedcore.Pipeline.from_config({"aggregate": "fedv"})
    assert str(err.value) == ("unknown component 'fedv' for slot 'aggregate': it is provided by the fedcore-fedv "
                              "package, which is installed but not loaded (FEDCORE_PLUGINS does not list 'fedv')")
    catalogue_env(FEDCORE_DISABLE_PLUGIN_AUTOLOAD="1")
    with pytest.raises(UnknownComponentError) as err:
        fedcore.plugins.lookup("safedlora.micro-vit-pretrained", kind="model")
    assert str(err.value) == ("unknown model 'safedlora.micro-vit-pretrained': it is provided by the "
                              "fedcore-safedlora package, which is installed but not loaded "
                              "(FEDCORE_DISABLE_PLUGIN_AUTOLOAD is set)")
    # a third-party name (not in the first-party index) lists that slot's providers and which plugins offer them
    with pytest.raises(UnknownComponentError) as err:
        fedcore.Pipeline.from_config({"aggregate": "trimmed-mean"})
    assert str(err.value).endswith("(installed plugins providing 'aggregate': builtin (fedcore "
                                   f"{fedcore.__version__}))")
    catalogue_env()
    assert fedcore.get("fedv-share").__name__ == "FedVShare"  # nothing cached from the filtered catalogue


def test_unknown_name_lists_every_installed_plugin_providing_the_slot(catalogue_env):
    catalogue_env()
    with pytest.raises(UnknownComponentError) as err:
        fedcore.Pipeline.from_config({"partition": "diriclet"})
    msg = str(err.value)
    assert msg.startswith("unknown component 'diriclet' for slot 'partition' (did you mean dirichlet, "
                          "inner-dirichlet?); choose one of: ")
    providers = fedcore.plugins.registry().providers("partition")
    assert msg.split("; choose one of: ")[1].split(" (installed")[0].split(", ") == sorted(e.name for e in providers)
    assert "fedavg" not in msg.split("(installed")[0]




def test_an_unknown_command_is_a_usage_error(capsys):
    """Exit 2 and argparse's own line (the CLI's main, in process: the process start is checked above)."""
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
