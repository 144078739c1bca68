"""The lint gate is real: ``scripts/lint`` fails on a planted error, and a bare ``scripts/dev test`` runs it first.

``scripts/lint`` runs here for real (ruff and mypy with the repository's pyproject) on a tiny tree shaped like the
repository, so a planted unused import or type error must fail it and the clean tree must pass. The order in
``scripts/dev`` is checked with a stand-in interpreter that records its calls: running the real suite inside the
suite is not possible, and what matters is that the gate runs before pytest and stops it.
"""
from __future__ import annotations

import os
from pathlib import Path
import shutil
import stat
import subprocess
import sys

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration  # each test runs scripts/lint or scripts/dev (bash, ruff, mypy)

CLEAN = '''"""A module that passes ruff and mypy."""


def double(x: int) -> int:
    return 2 * x
'''


def _tree(tmp_path: Path, core_module: str) -> Path:
    """A copy of the repository's lint script and config over a core, a substrate and a plugin of one file each."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "lint", repo / "scripts" / "lint")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    for package in ("fedcore", "substrates/fedcore-x/src/fedcore_x", "plugins/fedcore-y/src/fedcore_y"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").write_text(CLEAN)
    (repo / "fedcore" / "planted.py").write_text(core_module)
    return repo


def _lint(repo: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", "scripts/lint"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_lint_passes_a_clean_tree(tmp_path):
    result = _lint(_tree(tmp_path, CLEAN))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("planted", "reported"), [
    ('"""Unused import."""\nimport os\n', "F401"),
    ('"""Line too long."""\nX = "' + "x" * 130 + '"\n', "E501"),
    ('"""Type error."""\n\n\ndef half(x: int) -> str:\n    return x // 2\n', "[return-value]"),
])
def test_lint_fails_on_a_planted_error(tmp_path, planted, reported):
    result = _lint(_tree(tmp_path, planted))
    assert result.returncode != 0
    assert reported in result.stdout + result.stderr
    assert "planted.py" in result.stdout + result.stderr


UNSHIPPED = ("tests/test_planted.py", "examples/planted.py", "benchmarks/planted.py",
             "plugins/fedcore-y/tests/test_planted.py", "plugins/fedcore-y/repro/planted.py",
             "substrates/fedcore-x/tests/test_planted.py")


def test_ruff_reads_the_unshipped_code_mypy_only_the_shipped_and_neither_the_frozen_fixture(tmp_path):
    """Examples, benchmarks and every tests/ are linted by ruff (a planted unused import in each fails the gate); a
    type error there is not mypy's business, and the frozen third-party fixture is never linted."""
    repo = _tree(tmp_path, CLEAN)
    frozen = repo / "tests" / "fixtures" / "fedcore-robust-0.1.0"
    frozen.mkdir(parents=True)
    (frozen / "old.py").write_text('"""Frozen as written."""\nimport os\n')
    for path in UNSHIPPED:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text('"""Not shipped, still linted."""\n\n\ndef half(x: int) -> str:\n    return x // 2\n')
    result = _lint(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    for path in UNSHIPPED:
        (repo / path).write_text('"""Unused import."""\nimport os\n')
    result = _lint(repo)
    assert result.returncode != 0
    assert f"Found {len(UNSHIPPED)} errors" in result.stdout, result.stdout  # F401 in each planted file, none else
    for path in UNSHIPPED:
        assert f"{path}:2:8" in result.stdout, result.stdout
    assert "fedcore-robust-0.1.0" not in result.stdout + result.stderr


def _stand_in_venv(tmp_path: Path) -> Path:
    """A venv whose ``python`` only appends its arguments to $CALLS and fails ruff when $RUFF_RC says so; asked
    whether it holds the checkout (``scripts/installed_here.py``), it answers $HELD_RC, naming $STRAYS."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    python.write_text('#!/usr/bin/env bash\n'
                      'case "$1" in scripts/installed_here.py) echo "-m installed_here" >> "$CALLS"; '
                      '[ -n "${STRAYS:-}" ] && echo "$STRAYS"; exit "${HELD_RC:-0}" ;; esac\n'
                      'echo "$* ${MYPY_CACHE_DIR:+(MYPY_CACHE_DIR=$MYPY_CACHE_DIR)}'
                      '${PYTHONDONTWRITEBYTECODE:+(PYTHONDONTWRITEBYTECODE)}" >> "$CALLS"\n'
                      'case "$*" in *"-m ruff"*) exit "${RUFF_RC:-0}" ;; esac\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return venv


def _dev_test(tmp_path: Path, *args: str, ruff_rc: int = 0, held_rc: int = 0, strays: str = ""
              ) -> tuple[int, list[str], list[str]]:
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    venv = _stand_in_venv(tmp_path)
    env = {**os.environ, "FEDCORE_VENV": str(venv), "FEDCORE_ENV_ROOT": str(tmp_path / "env"), "CALLS": str(calls),
           "RUFF_RC": str(ruff_rc), "HELD_RC": str(held_rc), "STRAYS": strays, "PYTHONDONTWRITEBYTECODE": "1"}
    (tmp_path / "env").mkdir(exist_ok=True)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "dev"), "test", *args], env=env, capture_output=True,
                            text=True, timeout=120)
    lines = calls.read_text().splitlines()
    assert lines[0] == "-m installed_here", lines  # the environment is asked first, every time
    lines = lines[1:]
    steps = [line.split()[1] for line in lines]  # "-m pip ...", "-m ruff ..." -> module
    return result.returncode, steps, lines


def test_bare_dev_test_runs_ruff_and_mypy_before_the_whole_suite_on_every_core(tmp_path):
    rc, steps, lines = _dev_test(tmp_path)
    assert rc == 0
    assert steps == ["pip", "ruff", "mypy", "pytest"]
    assert lines[-1].split() == ["-m", "pytest", "-n", "auto", "--dist", "loadgroup",
                                 "--no-loadscope-reorder"]  # everything, no -m filter
    # mypy's cache lives in the environment, so a fresh clone of the checkout type-checks warm
    assert lines[2].endswith(f"(MYPY_CACHE_DIR={tmp_path / 'venv' / '.mypy_cache'})")


def test_a_failing_lint_stops_the_suite(tmp_path):
    rc, steps, _ = _dev_test(tmp_path, ruff_rc=1)
    assert rc != 0
    assert steps == ["pip", "ruff"]


def test_quick_lints_then_runs_all_but_the_integration_and_slow_tests_on_every_core(tmp_path):
    rc, steps, lines = _dev_test(tmp_path, "--quick")
    assert rc == 0
    # lint runs while pytest starts (scripts/dev): ruff then mypy, pytest beside them in either order
    assert steps[0] == "pip" and sorted(steps[1:]) == ["mypy", "pytest", "ruff"]
    assert steps.index("ruff") < steps.index("mypy")
    assert lines[steps.index("pytest")].split() == ["-m", "pytest", "-m", "not", "integration", "and", "not", "slow",
                                                   "-n", "auto", "--dist", "loadgroup", "--no-loadscope-reorder"]
    rc, steps, lines = _dev_test(tmp_path, "--quick", "tests/test_x.py", "-x")  # arguments: no lint, added
    assert rc == 0 and steps == ["pytest"]  # this environment already holds this checkout's packages: no pip
    assert lines[-1].split() == ["-m", "pytest", "-m", "not", "integration", "and", "not", "slow", "-n", "auto",
                                 "--dist", "loadgroup", "--no-loadscope-reorder", "tests/test_x.py", "-x"]


def test_a_lint_finding_fails_the_quick_loop_though_its_tests_pass(tmp_path):
    rc, steps, _ = _dev_test(tmp_path, "--quick", ruff_rc=1)
    assert rc != 0 and "ruff" in steps


def test_flags_alone_run_the_whole_suite_on_every_core_without_lint(tmp_path):
    rc, steps, lines = _dev_test(tmp_path, "--durations=30", "-x")
    assert rc == 0 and steps == ["pip", "pytest"]
    assert lines[-1].split() == ["-m", "pytest", "-n", "auto", "--dist", "loadgroup", "--no-loadscope-reorder",
                                 "--durations=30", "-x"]
    assert "(PYTHONDONTWRITEBYTECODE)" not in lines[-1]  # the tests write bytecode: rewritten modules are cached


def test_an_environment_holding_another_checkout_is_reinstalled_whatever_the_stamp_says(tmp_path):
    """The stamp matches (the first call wrote it), but the environment's editables are not this checkout's."""
    assert _dev_test(tmp_path, "tests/test_x.py")[1] == ["pip", "pytest"]
    assert _dev_test(tmp_path, "tests/test_x.py")[1] == ["pytest"]  # held, stamp matches: no pip
    rc, steps, lines = _dev_test(tmp_path, "tests/test_x.py", held_rc=1, strays="fedcore-extra")
    assert rc == 0 and steps == ["pip", "pip", "pytest"]
    assert lines[0].startswith("-m pip uninstall -y -q fedcore-extra") and " -e . " in lines[1]


def test_dev_test_with_arguments_runs_only_pytest(tmp_path):
    rc, steps, lines = _dev_test(tmp_path, "tests/test_x.py")
    assert rc == 0
    assert steps == ["pip", "pytest"]
    assert lines[-1].split() == ["-m", "pytest", "tests/test_x.py"]  # as given: one process, no -n
