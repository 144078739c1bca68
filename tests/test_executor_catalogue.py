"""Executors and config tables come from the catalogue: a third-party distribution, built and pip-installed into
tmp_path, adds an executor and a config table by name, and a config naming them runs in a fresh interpreter.

Every ``fedcore`` command these tests give runs in one fresh interpreter (``cli``: each command's exit status,
stdout and stderr, as ``python -m fedcore`` would give them), like tests/test_plugins_catalogue.py's scenarios:
importing fedcore and discovering the plugins costs seconds per interpreter."""
from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import textwrap

import attrs
import pytest
import tomllib

import fedcore

pytestmark = pytest.mark.xdist_group("executor-catalogue")  # the installed distribution and its one interpreter

PLUGIN = '''
"""A third-party executor that logs every job it runs, and a config table that labels the run."""
import json

import fedcore
from fedcore.jobs import InlineExecutor
from fedcore.errors import ConfigError
from fedcore.experiment import Key, Table


class LoggingExecutor(InlineExecutor):
    """Inline, plus one line per job in ``log``."""

    def __init__(self, *, log: str) -> None:
        self.log = log

    def run(self, jobs):
        results = super().run(jobs)
        with open(self.log, "a") as fh:
            for result in results:
                fh.write(json.dumps({"client": result.client_id}) + "\\n")
        return results


def check_label(value, where):
    if not isinstance(value.get("text"), str):
        raise ConfigError(f"{where}.text must be a string")


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add_executor("logging", LoggingExecutor)
    registry.add_table("label", Table(key=Key(kind=(dict,), default=None, help="a label for the run"),
                                      check=check_label, build=lambda value, context: {}))
'''

CONFIG = """
name = "third-party-executor"
rounds = 2
num_clients = 3
seed = 0
dataset = { name = "synthetic", n = 96, n_test = 48 }
model = "tiny-mlp"
executor = { name = "logging", log = "LOG" }

[label]
text = "hello"

[pipeline]
local_update = { name = "sgd", lr = 0.1 }
"""


def make_dist(root: Path) -> Path:
    d = root / "fc-exec"
    d.mkdir(parents=True)
    (d / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "fc-exec"
        version = "2.0.1"
        [project.entry-points.fedcore]
        fcexec = "fc_exec"
        [tool.setuptools]
        py-modules = ["fc_exec"]
    """))
    (d / "fc_exec.py").write_text(PLUGIN)
    return d


DRIVER = """
import contextlib, io, json, sys
from fedcore.cli import main
answers = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    answers.append({"returncode": status, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(answers))
"""


@attrs.frozen
class Answer:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> tuple[Path, dict[str, Answer]]:
    """(the directory the commands ran in, command name -> its answer): the distribution pip-installed into
    ``site``, then every command below in one ``python`` with ``PYTHONPATH=site``."""
    root = tmp_path_factory.mktemp("exec-dist")
    target = root / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           "--target", str(target), str(make_dist(root))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    work = root / "work"
    work.mkdir()
    (work / "run.toml").write_text(CONFIG.replace("LOG", str(work / "jobs.jsonl")))
    (work / "bad-label.toml").write_text(CONFIG.replace('text = "hello"', "text = 3"))
    (work / "bad-executor.toml").write_text(CONFIG.replace('name = "logging"', 'name = "loging"'))
    commands = {
        "run": ["run", str(work / "run.toml"), "--out", str(work / "run"), "--progress", "none"],
        "describe": ["describe", "logging", "--json"],
        "bad-label": ["describe", str(work / "bad-label.toml")],
        "bad-executor": ["describe", str(work / "bad-executor.toml")],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDCORE_")}
    env["PYTHONPATH"] = str(target)
    child = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(list(commands.values()))], capture_output=True,
                           text=True, env=env, cwd=work, timeout=300)
    assert child.returncode == 0, child.stderr
    answers = json.loads(child.stdout.strip().splitlines()[-1])
    return work, {name: Answer(**a) for name, a in zip(commands, answers)}


@pytest.mark.integration
def test_a_third_party_executor_and_table_run_by_name(cli):
    tmp_path, answers = cli
    log = tmp_path / "jobs.jsonl"
    proc = answers["run"]
    assert proc.returncode == 0, proc.stderr
    jobs = [json.loads(line) for line in log.read_text().splitlines()]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert sorted(j["client"] for j in jobs) == sorted(c for r in rows for c in r["clients"])  # every job it ran
    assert {j["client"] for j in jobs} == {0, 1, 2}
    resolved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    assert resolved["executor"] == {"name": "logging", "log": str(log)} and resolved["label"] == {"text": "hello"}

    described = answers["describe"]
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert (info["kind"], info["plugin"], info["distribution"], info["version"]) == ("executor", "fcexec", "fc-exec",
                                                                                     "2.0.1")
    assert info["settings"] == [{"name": "log", "type": "str", "required": True, "default": None, "allowed": "",
                                 "help": ""}]


@pytest.mark.integration
def test_a_plugin_table_is_checked_and_unknown_executors_list_the_registered_ones(cli):
    _, answers = cli
    bad = answers["bad-label"]
    assert bad.returncode == 2 and bad.stderr.strip() == "fedcore: error: label.text must be a string"
    bad = answers["bad-executor"]
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("fedcore: error: executor = 'loging': unknown executor 'loging' (did you mean "
                                  "logging?); choose one of: inline, logging, ray, threads")


def test_builtin_executors_and_tables_are_catalogue_entries():
    registry = fedcore.plugins.registry()
    assert {"inline", "ray", "threads"} <= set(registry.names("executor"))
    assert {"clock", "profiles", "faults"} <= set(registry.names("table"))
    builtin = next(p for p in fedcore.list_plugins() if p.name == "builtin")
    assert {"executor:inline", "executor:ray", "executor:threads", "table:clock", "table:faults"} \
        <= set(builtin.components)
    with pytest.raises(TypeError, match="takes a fedcore.experiment.config.Table"):
        registry.add_table("nope", {"key": 1})
