"""``fedcore new plugin``: every slot's skeleton is a working component that passes fedcore's contract checks and runs
in a pipeline (in-process here; tests/test_fresh_install.py installs one into a fresh venv and runs its own suite)."""
from __future__ import annotations

import importlib
import sys

import pytest
import tomllib

import fedcore
from fedcore.cli import main
from fedcore.scaffold import PIN, SLOTS, plugin_files
from fedcore.testing import checks_for, run_tiny_pipeline


@pytest.fixture
def generated(tmp_path, monkeypatch):
    def make(name, slot):
        out = tmp_path / name
        assert main(["new", "plugin", name, "--slot", slot, "--out", str(out)]) == 0
        monkeypatch.syspath_prepend(str(out / "src"))
        package = f"fedcore_{name.replace('-', '_')}"
        for mod in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            monkeypatch.delitem(sys.modules, mod)
        return out, importlib.import_module(package)
    return make


@pytest.mark.parametrize("slot", SLOTS)
def test_every_slots_skeleton_passes_the_contract_checks_and_runs(generated, slot):
    name = f"demo-{slot.replace('_', '-')}"
    out, package = generated(name, slot)
    (cls,) = [getattr(package, n) for n in package.__all__]
    component = cls()
    for check in checks_for(component):
        check(component)
    result = run_tiny_pipeline([component], rounds=2)
    assert len(result.history.column("test_accuracy")) == 2
    meta = tomllib.loads((out / "pyproject.toml").read_text())["project"]
    assert meta["name"] == f"fedcore-{name}" and PIN in meta["dependencies"]
    assert meta["entry-points"]["fedcore"] == {name: f"fedcore_{name.replace('-', '_')}.plugin"}
    readme = (out / "README.md").read_text()
    assert f"<!-- generated:{name}-results -->" in readme and f"<!-- /generated:{name}-results -->" in readme


def test_new_refuses_an_existing_directory_a_bad_name_and_an_unknown_slot(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    assert main(["new", "plugin", "x", "--out", str(tmp_path / "taken")]) == 2
    assert main(["new", "plugin", "Bad_Name", "--out", str(tmp_path / "b")]) == 2
    assert main(["new", "plugin", "ok", "--slot", "partition", "--out", str(tmp_path / "c")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"fedcore: error: {tmp_path / 'taken'} already exists; fedcore new writes a new directory and " \
                       "overwrites nothing"
    assert lines[1].startswith("fedcore: error: plugin name 'Bad_Name' must be lower-case")
    assert lines[2] == ("fedcore: error: --slot 'partition' is not allowed; choose one of: aggregate, local_update, "
                        "select, evaluate")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    assert set(plugin_files("x")) >= {"pyproject.toml", "README.md", "src/fedcore_x/plugin.py",
                                      "src/fedcore_x/recipes.py", "tests/test_contract.py"}
    assert fedcore.__version__  # the pin admits it: tests/test_version_policy.py
