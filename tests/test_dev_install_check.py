"""``scripts/dev`` skips reinstalling only when the environment holds THIS checkout's packages.

The cached environment is shared by every checkout with the same requirements (CI's main, fresh clones,
worktrees): a check that trusted a stamp alone ran one checkout's tests on another checkout's editable code.
``scripts/installed_here.py`` reads what is installed; here it is fed fake checkouts and fake site-packages.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("installed_here", ROOT / "scripts" / "installed_here.py")
assert spec is not None and spec.loader is not None
installed_here = importlib.util.module_from_spec(spec)
spec.loader.exec_module(installed_here)

CORE = """[project]
name = "fedcore"
version = "0.1.0"
[project.scripts]
fedcore = "fedcore.cli:main"
[project.entry-points.fedcore]
builtin = "fedcore.builtin.plugin"
"""


def plugin_toml(name: str, module: str) -> str:
    return (f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
            f'[project.entry-points.fedcore]\n{module} = "{module}.plugin"\n')


def checkout(path: Path, plugins: tuple[str, ...] = ("robust",)) -> Path:
    path.mkdir(parents=True)
    (path / "pyproject.toml").write_text(CORE)
    for p in plugins:
        (path / "plugins" / f"fedcore-{p}").mkdir(parents=True)
        (path / "plugins" / f"fedcore-{p}" / "pyproject.toml").write_text(plugin_toml(f"fedcore-{p}", p))
    (path / "substrates").mkdir()
    return path


def install(site: Path, name: str, directory: Path | None, entry_points: str, version: str = "0.1.0") -> None:
    """What pip writes for ``pip install -e directory`` (``directory=None``: a regular, non-editable install)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    if directory is not None:
        (info / "direct_url.json").write_text(json.dumps({"dir_info": {"editable": True},
                                                          "url": directory.resolve().as_uri()}))


CORE_POINTS = "[console_scripts]\nfedcore = fedcore.cli:main\n\n[fedcore]\nbuiltin = fedcore.builtin.plugin\n"


def robust_points(module: str = "robust") -> str:
    return f"[fedcore]\n{module} = {module}.plugin\n"


def check(root: Path, site: Path) -> tuple[list[str], list[str]]:
    return installed_here.problems(root, md.distributions(path=[str(site)]))


@pytest.fixture
def here(tmp_path: Path) -> Path:
    return checkout(tmp_path / "here")


def test_this_checkouts_editables_are_held(tmp_path, here):
    site = tmp_path / "site"
    install(site, "fedcore", here, CORE_POINTS)
    install(site, "fedcore-robust", here / "plugins" / "fedcore-robust", robust_points())
    install(site, "numpy", None, "")  # third-party, not editable: not ours to judge
    assert check(here, site) == ([], [])


def test_editables_of_another_checkout_are_not_held(tmp_path, here):
    """What happened: the shared environment's editables pointed at /check/work/main."""
    other = checkout(tmp_path / "other")
    site = tmp_path / "site"
    install(site, "fedcore", other, CORE_POINTS)
    install(site, "fedcore-robust", here / "plugins" / "fedcore-robust", robust_points())
    lines, strays = check(here, site)
    assert lines == [f"fedcore: installed from {other.resolve()}, not {here.resolve()}"] and strays == []


def test_a_missing_or_non_editable_package_is_not_held(tmp_path, here):
    site = tmp_path / "site"
    install(site, "fedcore", None, CORE_POINTS)
    lines, _ = check(here, site)
    assert lines == [f"fedcore: installed from a non-editable build, not {here.resolve()}",
                     "fedcore-robust: not installed"]


def test_a_plugin_this_checkout_lacks_is_a_stray_to_remove(tmp_path, here):
    other = checkout(tmp_path / "other", plugins=("robust", "extra"))
    site = tmp_path / "site"
    install(site, "fedcore", here, CORE_POINTS)
    install(site, "fedcore-robust", here / "plugins" / "fedcore-robust", robust_points())
    install(site, "fedcore-extra", other / "plugins" / "fedcore-extra", robust_points("extra"))
    lines, strays = check(here, site)
    assert strays == ["fedcore-extra"]
    assert lines == [f"fedcore-extra: installed editable from {(other / 'plugins' / 'fedcore-extra').resolve()}, "
                     "which this checkout lacks"]


def test_changed_entry_points_or_version_are_not_held(tmp_path, here):
    site = tmp_path / "site"
    install(site, "fedcore", here, CORE_POINTS, version="0.0.9")
    install(site, "fedcore-robust", here / "plugins" / "fedcore-robust", robust_points("robust_old"))
    lines, _ = check(here, site)
    assert lines == ["fedcore: installed version 0.0.9, pyproject.toml says 0.1.0",
                     "fedcore-robust: installed entry points differ from pyproject.toml's"]


def test_the_environment_running_this_suite_holds_this_checkout():
    """``scripts/dev test`` installed this checkout's packages into the interpreter running the tests."""
    assert installed_here.problems(ROOT, md.distributions()) == ([], [])
