"""The issue's done-when, for real: install the core and the example plugin into a fresh virtual environment,
run a federated job by the plugin's component name, uninstall the plugin, get "unknown component, choose one of".

The fresh venv has no pip and no packages of its own. Third-party packages (torch, pluggy, ...) come from the dev
environment through a ``.pth`` file listing a *filtered view* of its site-packages: a directory of symlinks that
leaves out fedcore's and the plugins' editable installs and every ``.pth`` file, so nothing from the checkout is
importable except what pip installs here. fedcore and fedcore-robust are copied out of the checkout and
installed from source (``--no-deps --no-build-isolation``, setuptools from the dev environment).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import sysconfig
import textwrap

ROOT = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent("""
    import json, sys
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import fedcore
    from fedcore.data import load_digits
    train, test = load_digits(seed=0)
    pipe = fedcore.Pipeline.from_config({
        "partition": {"name": "iid"},
        "local_update": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        "aggregate": {"name": "trimmed-mean", "beta": 0.2},
    })
    model = fedcore.plugins.lookup("tiny-mlp", kind="model").obj(num_classes=10)
    result = pipe.run(model=model, train=train, test=test, num_clients=5, rounds=2, seed=0)
    import fedcore_robust
    info = {p.name: [p.distribution, p.version] for p in fedcore.list_plugins()}
    print(json.dumps({"fedcore": fedcore.__file__, "plugin": fedcore_robust.__file__, "plugins": info,
                      "manifest": pipe.describe()["slots"], "acc": result.history.column("test_accuracy")}))
""")


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _copy_source(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache"))
    return dst


def test_install_run_by_name_uninstall(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEDCORE_", "PYTHON"))}
    fresh_site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path,
                           env).stdout.strip())

    # the dev environment's third-party packages, minus anything fedcore (editable finders, dist-infos, .pth files)
    deps = tmp_path / "deps"
    deps.mkdir()
    purelib = Path(sysconfig.get_path("purelib"))
    layered = [Path(line.strip()) for pth in sorted(purelib.glob("*.pth")) if not pth.name.startswith("__editable__")
               for line in pth.read_text().splitlines() if line.strip() and not line.startswith(("#", "import"))]
    for root in [purelib] + [d for d in layered if d.is_dir() and "fedcore" not in d.name.lower()]:
        # the dev env's own site-packages, then any site-packages it layers on through a .pth (a thin venv)
        for entry in root.iterdir():
            name = entry.name.lower()
            skip = name.startswith(("fedcore", "__editable__")) or name.endswith(".pth") or name == "__pycache__"
            if not skip and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (fresh_site / "dev-deps.pth").write_text(f"{deps}\n")
    probe = _run([str(py), "-c", "import fedcore"], tmp_path, env)
    assert "ModuleNotFoundError: No module named 'fedcore'" in probe.stderr, "the fresh venv must start without fedcore"

    core = _copy_source(ROOT / "fedcore", tmp_path / "src" / "core" / "fedcore").parent
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, core / f)
    plugin = _copy_source(ROOT / "plugins" / "fedcore-robust", tmp_path / "src" / "fedcore-robust")
    install = _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    str(core), str(plugin)], tmp_path, env)
    assert install.returncode == 0, install.stderr

    job = _run([str(py), "-c", JOB], tmp_path, env)
    assert job.returncode == 0, job.stderr
    out = json.loads(job.stdout.strip().splitlines()[-1])
    assert out["fedcore"].startswith(str(venv)) and out["plugin"].startswith(str(venv))  # not the checkout
    assert out["plugins"]["robust"] == ["fedcore-robust", "0.1.0"] and out["plugins"]["builtin"] == ["fedcore", "0.1.0"]
    assert out["manifest"]["aggregate"] == "trimmed-mean"
    assert len(out["acc"]) == 2 and out["acc"][-1] > 0.2  # 10 classes: chance is 0.1

    uninstall = _run([str(py), "-m", "pip", "uninstall", "-y", "fedcore-robust"], tmp_path, env)
    assert uninstall.returncode == 0, uninstall.stderr
    gone = _run([str(py), "-c", JOB], tmp_path, env)
    assert gone.returncode != 0
    last = gone.stderr.strip().splitlines()[-1]
    assert last.startswith("fedcore.errors.UnknownComponentError: unknown component 'trimmed-mean' for slot "
                           "'aggregate'"), gone.stderr
    choices, _, note = last.split("; choose one of: ")[1].partition(" (installed plugins providing 'aggregate': ")
    assert {"fedavg", "fedasync", "fedbuff"} <= set(choices.split(", ")) and "sgd" not in choices  # that slot's only
    assert note == "builtin (fedcore 0.1.0))" and "median" not in last

    # a first-party method plugin that is not installed: one line naming the package to install
    first_party = _run([str(py), "-c", "import fedcore; fedcore.Pipeline.from_config({'aggregate': 'fedv'})"],
                       tmp_path, env)
    assert first_party.stderr.strip().splitlines()[-1] == (
        "fedcore.errors.UnknownComponentError: unknown component 'fedv' for slot 'aggregate': it is provided by the "
        "fedcore-fedv package, which is not installed (pip install fedcore-fedv)"), first_party.stderr
