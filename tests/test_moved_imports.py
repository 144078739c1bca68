"""Every import path that left the core in 0.1.1 still works until 1.0: same module object, a DeprecationWarning
naming the new place, attributed to the importing line; a missing new package is named with its pip line."""
from __future__ import annotations

import importlib
from pathlib import Path
import subprocess
import sys
import warnings

import pytest

from fedcore import _moved

ROOT = Path(__file__).resolve().parents[1]

# old module -> new module: every module that existed under the old paths in fedcore 0.1
OLD_TO_NEW = {
    "fedcore.split": "fedcore_split",
    **{f"fedcore.split.{m}": f"fedcore_split.{m}" for m in (
        "aggregate", "components", "endpoint", "evaluate", "rules", "share", "stages", "state", "train")},
    "fedcore.split.spsa": "fedcore_fedv.spsa",
    "fedcore.split.inversion": "fedcore_fedv.inversion",
    "fedcore.lora": "fedcore_lora",
    **{f"fedcore.lora.{m}": f"fedcore_lora.{m}" for m in ("adapters", "rank", "share")},
    "fedcore.prompt": "fedcore_clip",
    **{f"fedcore.prompt.{m}": f"fedcore_clip.{m}" for m in (
        "backbone", "captioned", "evaluate", "features", "learner", "pretrain", "share", "testing", "training",
        "update")},
    "fedcore.schedules": "fedcore_safedlora.schedules",
}


def forget(old: str) -> None:
    """Drop the old names (not the new modules) from sys.modules, so the next import goes through the alias."""
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        if not name.startswith("fedcore_"):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def fresh_aliases():
    for root in ("fedcore.split", "fedcore.lora", "fedcore.prompt", "fedcore.schedules"):
        forget(root)
    yield
    for root in ("fedcore.split", "fedcore.lora", "fedcore.prompt", "fedcore.schedules"):
        forget(root)


@pytest.mark.parametrize("old, new", sorted(OLD_TO_NEW.items()))
def test_old_path_imports_the_same_module_and_warns_with_the_new_place(old, new):
    assert _moved.new_name(old) == new
    with warnings.catch_warnings():  # the parent package first: its own warning is not the one checked here
        warnings.simplefilter("ignore")
        importlib.import_module(old.rpartition(".")[0] if old.count(".") > 1 else "fedcore")
    ns: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(f"import {old} as module", __file__, "exec"), ns)
    moved = [w for w in caught if issubclass(w.category, DeprecationWarning) and str(w.message).startswith(f"{old} ")]
    assert len(moved) == 1, [str(w.message) for w in caught]
    message = str(moved[0].message)
    assert f"{old} moved to {new} " in message and "pip install fedcore-" in message and "1.0" in message
    assert moved[0].filename == __file__  # the importing line, not the import machinery
    assert ns["module"] is importlib.import_module(new) is sys.modules[old]
    assert ns["module"].__spec__.name == new  # the module keeps its own spec


def run_warned(code: str) -> tuple[dict, list[str]]:
    """Run ``code``; return its namespace and the DeprecationWarning messages it raised."""
    ns: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, __file__, "exec"), ns)
    return ns, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


def test_from_old_package_import_names_and_submodules_that_moved_elsewhere():
    import fedcore_split

    for name in ("inversion", "spsa"):  # set on the package by an earlier ``import fedcore.split.<name>``
        fedcore_split.__dict__.pop(name, None)
    ns, messages = run_warned("from fedcore.split import SPSA, inversion, stage_names")
    from fedcore_fedv import inversion
    from fedcore_fedv.spsa import SPSA
    assert ns["SPSA"] is SPSA and ns["inversion"] is inversion and ns["stage_names"] is fedcore_split.stage_names
    assert any(m.startswith("fedcore.split.SPSA moved to fedcore_fedv.spsa.SPSA (pip install fedcore-fedv)")
               for m in messages), messages
    assert any(m.startswith("fedcore.split.inversion moved to fedcore_fedv.inversion") for m in messages), messages

    ns, messages = run_warned("from fedcore.lora import LoRAShare, inject_lora")
    import fedcore_lora
    assert ns["LoRAShare"] is fedcore_lora.LoRAShare and ns["inject_lora"] is fedcore_lora.inject_lora
    assert messages == [("fedcore.lora moved to fedcore_lora (pip install fedcore-lora); "
                         "the old path works until fedcore 1.0")]
    ns, messages = run_warned("from fedcore.schedules import RankSchedule")
    assert ns["RankSchedule"].__module__ == "fedcore_safedlora.schedules" and len(messages) == 1
    with pytest.raises(ImportError, match="cannot import name 'nothing'"):
        run_warned("from fedcore.split import nothing")


def test_a_missing_new_package_is_named_with_its_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "fedcore_lora", None)  # as if fedcore-lora were not installed
    with pytest.raises(ModuleNotFoundError, match=r"^fedcore\.lora moved to fedcore_lora, which is not installed: "
                                                  r"pip install fedcore-lora$") as info:
        import fedcore.lora  # noqa: F401
    assert info.value.name == "fedcore.lora"
    with pytest.raises(ModuleNotFoundError, match="No module named 'fedcore_split.nothere'"):
        run_warned("import fedcore.split.nothere")  # the package is there; the module never was


def test_unmoved_names_are_left_to_the_normal_finders():
    assert _moved.new_name("fedcore.scheduling") is None and _moved.new_name("fedcore.splitter") is None
    assert _moved.MovedFinder().find_spec("fedcore.engine") is None
    assert _moved.MovedFinder().find_spec("numpy") is None


@pytest.mark.integration
def test_python_dash_m_on_an_old_module_path_runs_the_new_module():
    out = subprocess.run([sys.executable, "-m", "fedcore.prompt.pretrain", "--help"], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "--dataset {shapes,digits}" in out.stdout
