"""The entry-point catalogue, against real distributions built and pip-installed into tmp_path.

Each scenario runs in a subprocess (a fresh interpreter, as after a real ``pip install``) with
``PYTHONPATH`` pointing at the ``--target`` directory, so the dev environment is never touched.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.xdist_group("plugins-catalogue")  # one build of the distributions, one probe interpreter

PROBE = textwrap.dedent("""
    import json, os, sys
    import fedcore

    def scenario(names):
        out = {}
        try:
            out["plugins"] = {p.name: {"ok": p.ok, "dist": p.distribution, "version": p.version,
                                       "components": list(p.components), "error": p.error}
                              for p in fedcore.list_plugins()}
        except Exception as exc:
            out["plugins"] = f"{type(exc).__name__}: {exc}"
        for name in names:
            try:
                out[name] = "ok:" + fedcore.get(name).__name__
            except Exception as exc:
                cause = exc.__cause__
                out[name] = (f"{type(exc).__name__}: {exc}"
                             + (f" | cause {type(cause).__name__}: {cause}" if cause else ""))
        return out

    # the first scenario runs on the environment the process started with; later ones change the
    # environment / sys.path and rebuild the catalogue with fedcore.plugins.refresh()
    results, base_path = {}, list(sys.path)
    for i, sc in enumerate(json.loads(sys.argv[1])):
        if i:
            for k in [k for k in os.environ if k.startswith("FEDCORE_")]:
                del os.environ[k]
            os.environ.update(sc["env"])
            sys.path[:] = sc["path"] + base_path
            fedcore.plugins.refresh()
        results[sc["id"]] = scenario(sc["names"])
    print(json.dumps(results))
""")


def make_dist(root: Path, dist: str, entry_point: str, module: str, body: str) -> Path:
    """A minimal setuptools project: one module, one ``fedcore`` entry point."""
    d = root / dist
    d.mkdir(parents=True)
    (d / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist}"
        version = "1.2.3"
        [project.entry-points.fedcore]
        {entry_point} = "{module}"
        [tool.setuptools]
        py-modules = ["{module}"]
    """))
    (d / f"{module}.py").write_text(textwrap.dedent(body))
    return d


def registering(*names: str) -> str:
    adds = "\n".join(f"    registry.add({n!r}, Agg)" for n in names)
    return (
        "import attrs\nimport fedcore\n\n"
        "@attrs.frozen(eq=False, kw_only=True)\nclass Agg:\n    \"\"\"A mean.\"\"\"\n\n"
        "    @fedcore.hookimpl\n    def fedcore_aggregate(self, model, updates, ctx):\n"
        "        from fedcore.builtin import FedAvg\n"
        "        return FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)\n\n"
        "@fedcore.hookimpl\ndef fedcore_register_components(registry):\n" + adds + "\n"
    )


def pip_install(target: Path, *projects: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           "--target", str(target), *map(str, projects)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def probe_all(scenarios: list[dict]) -> dict:
    """Run every scenario in one fresh interpreter (importing fedcore costs seconds on a loaded machine)."""
    first = scenarios[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDCORE_")}
    env.update(first["env"], PYTHONPATH=os.pathsep.join(first["path"]))
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(scenarios)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sc(id: str, path: Path, *names: str, **env: str) -> dict:
    return {"id": id, "path": [str(path)], "names": list(names), "env": env}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("dists")
    site, dup, clash = root / "site", root / "dup", root / "clash"
    pip_install(site, make_dist(root, "fc-alpha", "alpha", "fc_alpha", registering("alpha-agg")),
                make_dist(root, "fc-beta", "beta", "fc_beta", registering("beta-agg")),
                make_dist(root, "fc-broken", "broken", "fc_broken", "raise ImportError('fc_broken needs libfoo')\n"))
    pip_install(dup, make_dist(root, "fc-dup-one", "dup", "fc_dup_one", registering("dup-one")),
                make_dist(root, "fc-dup-two", "dup", "fc_dup_two", registering("dup-two")))
    pip_install(clash, make_dist(root, "fc-clash-one", "clashone", "fc_clash_one", registering("same-name")),
                make_dist(root, "fc-clash-two", "clashtwo", "fc_clash_two", registering("same-name")))
    return probe_all([
        sc("default", site, "alpha-agg", "beta-agg", "fedavg", "broken-agg", "no-such-thing"),
        sc("only-alpha", site, "alpha-agg", "beta-agg", FEDCORE_PLUGINS="alpha"),
        sc("none", site, "alpha-agg", "fedavg", FEDCORE_PLUGINS=""),
        sc("alpha-beta", site, FEDCORE_PLUGINS=" alpha , beta "),
        sc("disabled", site, "alpha-agg", "fedavg", FEDCORE_DISABLE_PLUGIN_AUTOLOAD="1", FEDCORE_PLUGINS="alpha"),
        sc("disable-0", site, "alpha-agg", FEDCORE_DISABLE_PLUGIN_AUTOLOAD="0"),
        sc("dup", dup, "fedavg"),
        sc("clash", clash, FEDCORE_PLUGINS="clashone,clashtwo"),
    ])


@pytest.mark.integration
def test_installed_plugins_are_discovered_with_their_distribution(out):
    res = out["default"]
    alpha = res["plugins"]["alpha"]
    assert alpha == {"ok": True, "dist": "fc-alpha", "version": "1.2.3", "components": ["alpha-agg"], "error": None}
    assert res["plugins"]["builtin"]["ok"] and res["plugins"]["builtin"]["dist"] == "fedcore"
    assert res["alpha-agg"] == res["beta-agg"] == "ok:Agg" and res["fedavg"] == "ok:FedAvg"


@pytest.mark.integration
def test_a_broken_plugin_is_recorded_and_fails_only_when_asked_for(out):
    res = out["default"]
    broken = res["plugins"]["broken"]
    assert not broken["ok"] and broken["dist"] == "fc-broken"
    assert "ImportError: fc_broken needs libfoo" in broken["error"]
    # everything else still works
    assert res["fedavg"] == "ok:FedAvg" and res["alpha-agg"] == "ok:Agg"
    # a name that may come from the broken plugin raises its import failure
    assert res["broken-agg"].startswith(
        "BrokenPluginError: component 'broken-agg' may come from plugin 'broken' (fc-broken)")
    assert "fc_broken needs libfoo" in res["broken-agg"] and "restart the process" in res["broken-agg"]
    # the first line alone (what the CLI prints) names the import failure, e.g. the package that is missing
    assert res["broken-agg"].splitlines()[0].endswith("which failed to import: ImportError: fc_broken needs libfoo")
    # an unrelated unknown name lists the choices and names the broken plugin as the cause
    assert res["no-such-thing"].startswith("UnknownComponentError: unknown component 'no-such-thing'")
    assert "choose one of:" in res["no-such-thing"] and "alpha-agg" in res["no-such-thing"]
    assert "cause BrokenPluginError: plugins that failed to import: broken (fc-broken)" in res["no-such-thing"]


@pytest.mark.integration
def test_fedcore_plugins_limits_what_is_loaded(out):
    res = out["only-alpha"]
    assert set(res["plugins"]) == {"builtin", "alpha"}  # broken is not even imported
    assert res["alpha-agg"] == "ok:Agg" and res["beta-agg"].startswith("UnknownComponentError")
    assert set(out["none"]["plugins"]) == {"builtin"} and out["none"]["fedavg"] == "ok:FedAvg"
    assert set(out["alpha-beta"]["plugins"]) == {"builtin", "alpha", "beta"}


@pytest.mark.integration
def test_disable_plugin_autoload_keeps_only_the_builtins(out):
    res = out["disabled"]
    assert set(res["plugins"]) == {"builtin"}
    assert res["fedavg"] == "ok:FedAvg" and "unknown component 'alpha-agg'" in res["alpha-agg"]
    assert out["disable-0"]["alpha-agg"] == "ok:Agg"


@pytest.mark.integration
def test_same_entry_point_name_from_two_distributions_names_both(out):
    msg = out["dup"]["plugins"]
    assert msg.startswith("PluginConflictError: plugin name 'dup' is offered by two distributions: ")
    assert "fc-dup-one 1.2.3 (fc_dup_one)" in msg and "fc-dup-two 1.2.3 (fc_dup_two)" in msg
    assert msg.endswith("uninstall one of them")


@pytest.mark.integration
def test_same_component_name_from_two_distributions_names_both(out):
    msg = out["clash"]["plugins"]
    assert msg.startswith("PluginConflictError: component name 'same-name' is registered by both ")
    assert "clashone (fc-clash-one 1.2.3)" in msg and "clashtwo (fc-clash-two 1.2.3)" in msg


def test_refresh_and_installed_is_not_active():
    import fedcore

    before = [p.name for p in fedcore.list_plugins()]
    fedcore.plugins.refresh()
    assert [p.name for p in fedcore.list_plugins()] == before
    # an installed plugin's components are resolvable by name but never join a pipeline on their own
    pipe = fedcore.Pipeline([])
    assert {type(c).__module__.split(".")[0] for c in pipe.components} == {"fedcore"}
