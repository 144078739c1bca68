"""One registration shape for every distribution (issue 25 item 4): its ``fedcore`` entry point is
``<package>.plugin``, and only that module touches the registry. A package ``__init__`` that registers (the old
``fedcore_distill.register`` / ``fedcore_split.register``) would run registration code on every import of the
package and gives readers two places to look; the rule is checked by reading the files, and shown to fail on a
synthetic tree."""
from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_CALLS = ("add", "add_model", "add_dataset", "add_recipe")


def registration_problems(folders: list[Path]) -> list[str]:
    problems = []
    for dist in sorted(d for folder in folders for d in folder.iterdir() if (d / "pyproject.toml").is_file()):
        project = tomllib.loads((dist / "pyproject.toml").read_text())["project"]
        points = project.get("entry-points", {}).get("fedcore", {})
        packages = [p for p in (dist / "src").iterdir() if (p / "__init__.py").is_file()]
        if len(points) != 1 or len(packages) != 1:
            problems.append(f"{dist.name}: {len(points)} fedcore entry points and {len(packages)} packages; "
                            "expected one of each")
            continue
        package = packages[0]
        target = next(iter(points.values()))
        if target != f"{package.name}.plugin" or not (package / "plugin.py").is_file():
            problems.append(f"{dist.name}: the fedcore entry point is {target!r}; expected {package.name}.plugin")
        for path in sorted(package.rglob("*.py")):
            if path == package / "plugin.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in REGISTRY_CALLS and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "registry"):
                    where = f"{dist.name}: {path.relative_to(dist)}:{node.lineno}"
                    problems.append(f"{where}: registry.{node.func.attr}() outside plugin.py")
                elif isinstance(node, ast.FunctionDef) and node.name == "fedcore_register_components":
                    where = f"{dist.name}: {path.relative_to(dist)}:{node.lineno}"
                    problems.append(f"{where}: fedcore_register_components outside plugin.py")
    return problems


def test_every_distribution_registers_in_its_plugin_module_only():
    assert registration_problems([ROOT / "plugins", ROOT / "substrates"]) == []


def test_the_rule_names_an_init_that_registers_and_an_entry_point_elsewhere(tmp_path):
    def dist(name: str, target: str, init: str) -> None:
        package = tmp_path / "plugins" / name / "src" / name.replace("-", "_")
        package.mkdir(parents=True)
        (tmp_path / "plugins" / name / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\n[project.entry-points.fedcore]\nx = "{target}"\n')
        (package / "__init__.py").write_text(init)
        (package / "plugin.py").write_text("def fedcore_register_components(registry):\n    registry.add('a', 1)\n")

    dist("fc-good", "fc_good.plugin", "")
    assert registration_problems([tmp_path / "plugins"]) == []
    dist("fc-init", "fc_init.plugin", "def register(registry):\n    registry.add_recipe('r', 1)\n")
    dist("fc-point", "fc_point", "")
    assert registration_problems([tmp_path / "plugins"]) == [
        "fc-init: src/fc_init/__init__.py:2: registry.add_recipe() outside plugin.py",
        "fc-point: the fedcore entry point is 'fc_point'; expected fc_point.plugin"]
