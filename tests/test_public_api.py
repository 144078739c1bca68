"""One public API, enforced: ``__all__`` is the truth, ``docs/plugins.md`` lists it, plugins import only it.

The public modules are the rows of the table in docs/plugins.md ("The public API"); each row's names
must equal that module's ``__all__``, and every plugin's and substrate's source may import from
``fedcore`` only those modules and names (``fedcore.data.labels_of``, not ``fedcore.data.arrays.labels_of``).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
import re
import types

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins.md"
SECTION = "## 12. The public API"


def documented_api() -> dict[str, list[str]]:
    """module -> names, from the table of the public-API section of docs/plugins.md."""
    text = DOC.read_text()
    assert SECTION in text, f"docs/plugins.md lost its section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    api: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`fedcore"):
            continue
        module = cells[0].strip("`")
        assert module not in api, f"{module} is listed twice"
        api[module] = re.findall(r"`([^`]+)`", cells[2])
    return api


PUBLIC = documented_api()


def test_the_doc_lists_some_modules():
    assert {"fedcore", "fedcore.types", "fedcore.testing", "fedcore.training"} <= set(PUBLIC)


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_documented_names_are_the_modules_all(module):
    mod = importlib.import_module(module)
    assert hasattr(mod, "__all__"), f"{module} is documented as public but has no __all__"
    documented, declared = set(PUBLIC[module]), set(mod.__all__)
    assert len(mod.__all__) == len(declared), f"{module}.__all__ lists a name twice"
    assert not declared - documented, f"in {module}.__all__ but not in docs/plugins.md: {sorted(declared - documented)}"
    assert not documented - declared, f"in docs/plugins.md but not in {module}.__all__: {sorted(documented - declared)}"
    for name in mod.__all__:
        value = getattr(mod, name)  # every listed name exists
        if isinstance(value, types.ModuleType):
            assert value.__name__ in PUBLIC, f"{module}.{name} is a module: it needs its own row in docs/plugins.md"
        elif hasattr(mod, "__path__"):
            # a submodule of the same name replaces the package attribute once anything imports it, so
            # `from package import name` would hand out the module instead (whichever import ran first)
            assert importlib.util.find_spec(f"{module}.{name}") is None, (
                f"{module}.{name} is both a public name and a submodule: rename the submodule")


def private_uses(source: str, public: dict[str, list[str]]) -> list[str]:
    """Every use of a ``fedcore`` module or name outside ``public``, as ``line N: what``."""
    tree = ast.parse(source)
    names = {m: set(v) for m, v in public.items()}
    bound: dict[str, str] = {}  # local name -> the fedcore module it is bound to
    problems = []

    def fedcore_module(name: str | None) -> bool:
        return name is not None and (name == "fedcore" or name.startswith("fedcore."))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not fedcore_module(alias.name):
                    continue
                if alias.name not in names:
                    problems.append(f"line {node.lineno}: import {alias.name} (not a public module)")
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound["fedcore"] = "fedcore"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and fedcore_module(node.module):
            module = node.module
            if module not in names:
                problems.append(f"line {node.lineno}: from {module} import ... (not a public module)")
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if sub in names:
                    bound[alias.asname or alias.name] = sub
                elif alias.name not in names[module]:
                    problems.append(f"line {node.lineno}: from {module} import {alias.name} "
                                    f"(not in {module}.__all__)")

    def module_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = module_of(node.value)
            if parent is not None and f"{parent}.{node.attr}" in names:
                return f"{parent}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            module = module_of(node.value)
            if module is not None and node.attr not in names[module] and f"{module}.{node.attr}" not in names:
                problems.append(f"line {node.lineno}: {module}.{node.attr} (not in {module}.__all__)")
    return sorted(set(problems))


def sources() -> list[Path]:
    return sorted([*ROOT.glob("plugins/*/src/**/*.py"), *ROOT.glob("substrates/*/src/**/*.py")])


def test_there_are_plugin_sources_to_scan():
    assert len(sources()) > 20


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_and_substrates_import_only_the_public_api(path):
    problems = private_uses(path.read_text(), PUBLIC)
    assert not problems, f"{path.relative_to(ROOT)} uses fedcore outside its public API:\n" + "\n".join(problems)


def test_the_scan_catches_every_way_to_reach_a_private_name():
    source = "\n".join([
        "import fedcore",
        "import fedcore.engine.loop",                       # 2: private module
        "import fedcore.data as fd",
        "from fedcore.data.arrays import batches",          # 4: private submodule of a public package
        "from fedcore import Pipeline, hookimpl, pipeline", # 5: 'pipeline' is a private module
        "from fedcore.types import Share, _as_index_tuple", # 6: not in __all__
        "from fedcore import *",                            # 7: not a name
        "x = fedcore.engine",                               # 8
        "y = fedcore.types.ClientUpdate",
        "z = fd.arrays.ArrayDataset",                       # 10
        "w = fedcore.data.batches",
        "v = fedcore.testing.contracts",                    # 12
    ])
    problems = private_uses(source, PUBLIC)
    lines = sorted({int(p.split(":")[0].split()[1]) for p in problems})
    assert lines == [2, 4, 5, 6, 7, 8, 10, 12], problems
