"""The layering rules as tests (issue 25 items 3 and 4), each shown to fail on a synthetic tree with a bad import.

1. Contract modules (what plugins are written against) import nothing from the engine, the built-ins or the
   experiment layer: not at import time, not lazily, not for type checking; and what they import at import time
   does not reach those layers either.
2. No substrate imports a plugin.
3. A plugin imports another plugin only when its ``pyproject.toml`` declares the dependency.
4. No import cycle among core modules at import time. An import inside a function that would close a cycle if it
   were at module level is listed in :data:`LAZY_CYCLE_BREAKERS` with the reason it stays lazy.
5. No script under ``examples/`` imports a plugin's or substrate's package (a method's script is in its ``repro/``).
6. The core imports no substrate and no plugin: layers point one way (core <- substrates <- plugins). No module
   under ``fedcore/`` imports ``fedcore_<anything>`` (the substrates and every plugin package), peft or open_clip,
   and timm only inside a function body (so ``import fedcore`` never needs timm); literal
   ``importlib.import_module("...")`` / ``__import__("...")`` calls count as imports. A second check imports every
   core module in a fresh interpreter and looks at ``sys.modules``.

Edges are static imports (``import a.b``, ``from a import b``, relative ones resolved); ``from package import
name`` points at the submodule when ``name`` is one. Every source file is parsed once per test process
(:func:`scan`); the rules read the same scans, and the tests that scan the real tree run on one xdist worker.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
import functools
from pathlib import Path
import subprocess
import sys
import textwrap

import attrs
import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
REAL_TREE = pytest.mark.xdist_group("import-rules")
"""The tests that scan the real tree: one worker runs them, so each file is parsed once per run."""

CONTRACT = ("fedcore.hookspecs", "fedcore.types", "fedcore.contexts", "fedcore.network", "fedcore.jobs",
            "fedcore.runtime.clock", "fedcore.markers")
FORBIDDEN_FOR_CONTRACT = ("fedcore.engine", "fedcore.builtin", "fedcore.experiment")

LAZY_CYCLE_BREAKERS = {
    ("fedcore.pipeline", "fedcore.builtin.defaults"):
        "the built-in defaults are components built on Pipeline's hooks; a pipeline asks for them when it is made",
    ("fedcore.pipeline", "fedcore"): "the package's __version__, for Pipeline.describe(); fedcore/__init__ imports "
                                     "the pipeline",
    ("fedcore.errors", "fedcore._deprecated"): "a removed error name warns on first access (module __getattr__); "
                                               "the deprecation helpers raise fedcore errors",
    ("fedcore.builtin.fedasync", "fedcore.testing"): "__fedcore_checks__ companions: the contract kit is loaded only "
                                                     "when a check asks for the component's plan",
    ("fedcore.builtin.fedbuff", "fedcore.testing"): "__fedcore_checks__ companion (as fedasync)",
    ("fedcore.builtin.natural_id", "fedcore.testing"): "__fedcore_checks__ companion and its tiny fixture data",
    ("fedcore.builtin.partitioners", "fedcore.testing"): "__fedcore_checks__ companion (as fedasync)",
}


@attrs.frozen
class Import:
    source: str  # the importing module
    target: str  # the imported module (the nearest module of the tree, or the external name)
    line: int
    lazy: bool  # inside a function body
    typing_only: bool  # under ``if TYPE_CHECKING:``


def modules_of(src: Path) -> dict[str, Path]:
    """``dotted.name -> file`` for every module under ``src`` (a directory holding top-level packages)."""
    out = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


@attrs.frozen
class Found:
    """One import as written: ``import name`` (one per alias), ``from module import names`` (``level`` dots), or a
    literal ``importlib.import_module("name")`` / ``__import__("name")`` call."""

    kind: str  # "import", "from" or "call"
    name: str  # the imported module ("" for ``from . import x``)
    level: int
    names: tuple[str, ...]  # what a ``from`` import takes
    line: int
    in_function: bool  # inside a function or lambda body
    typing_only: bool  # under ``if TYPE_CHECKING:``


_CALLS = ("import_module", "__import__")


def scan(source: str, filename: str) -> tuple[Found, ...]:
    """Every import of a source text, in the order it is written, parsed once per process (the rules below read
    the same files). ``filename`` names the file in a syntax error."""
    try:
        return _scan(source)
    except SyntaxError:
        ast.parse(source, filename)  # the same error, naming the file
        raise


@functools.cache
def _scan(source: str) -> tuple[Found, ...]:
    """Import statements sit only in statement bodies, so expressions are entered only where the text can hold
    an import call."""
    found: list[Found] = []
    calls = any(name in source for name in _CALLS)

    def visit(node: ast.AST, in_function: bool, typing_only: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            if calls:
                visit(node.test, in_function, typing_only)
            for child in node.body:
                visit(child, in_function, True)
            for child in node.orelse:
                visit(child, in_function, typing_only)
            return
        if isinstance(node, ast.Import):
            found.extend(Found("import", a.name, 0, (), node.lineno, in_function, typing_only) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append(Found("from", node.module or "", node.level, tuple(a.name for a in node.names), node.lineno,
                               in_function, typing_only))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in _CALLS:
                found.append(Found("call", node.args[0].value, 0, (), node.lineno, in_function, typing_only))
        for child in ast.iter_child_nodes(node):
            if calls or isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                visit(child, in_function, typing_only)

    visit(ast.parse(source), False, False)
    return tuple(found)


def scan_file(path: Path) -> tuple[Found, ...]:
    return scan(path.read_text(), str(path))


def imports_of(modules: dict[str, Path], known: Iterable[str] = ()) -> list[Import]:
    """Every static import of every module; targets inside ``modules`` or ``known`` resolve to the nearest module."""
    names = set(modules) | set(known)
    found: list[Import] = []
    for module, path in modules.items():
        found.extend(_imports_of_module(module, path, names))
    return found


def _imports_of_module(module: str, path: Path, names: set[str]) -> list[Import]:
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def nearest(target: str) -> str:
        while target not in names and "." in target:
            target = target.rsplit(".", 1)[0]
        return target

    for f in scan_file(path):
        if f.kind == "import":
            found.append(Import(module, nearest(f.name), f.line, f.in_function, f.typing_only))
        elif f.kind == "from":
            if f.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (f.level - 1)]
                origin = ".".join(base + ([f.name] if f.name else []))
            else:
                origin = f.name
            for alias in f.names:
                sub = f"{origin}.{alias}"
                found.append(Import(module, sub if sub in names else nearest(origin), f.line, f.in_function,
                                    f.typing_only))
    return found


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def import_time_graph(found: Iterable[Import], modules: Iterable[str]) -> dict[str, set[str]]:
    """Module-level, non-typing edges among ``modules``."""
    inside = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in inside}
    for imp in found:
        if not imp.lazy and not imp.typing_only and imp.target in inside:
            graph[imp.source].add(imp.target)
    return graph


def reachable(graph: dict[str, set[str]], start: str, *, with_parents: bool = False) -> set[str]:
    """Modules imported (transitively) by importing ``start``; ``with_parents`` adds each module's parent
    packages below the root package (``fedcore.runtime.meter`` runs ``fedcore/runtime/__init__.py`` first)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(graph.get(module, ()))
        if with_parents:
            parts = module.split(".")
            todo.extend(".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in graph)
    return seen


# -- rule 1: contract modules -----------------------------------------------------------------------------------


def contract_problems(src: Path, contract: Iterable[str] = CONTRACT,
                      forbidden: Iterable[str] = FORBIDDEN_FOR_CONTRACT) -> list[str]:
    contract = tuple(contract)
    packages = {name.split(".", 1)[0] for name in contract}  # only their packages' modules can be on a path
    modules = {m: p for m, p in modules_of(src).items() if m.split(".", 1)[0] in packages}
    found = imports_of(modules)
    problems = []
    for imp in found:
        if imp.source in contract and _within(imp.target, forbidden):
            how = "for type checking" if imp.typing_only else "lazily" if imp.lazy else "at import time"
            problems.append(f"{imp.source}:{imp.line} imports {imp.target} {how}")
    graph = import_time_graph(found, modules)
    for module in contract:
        if module not in graph:
            continue
        bad = sorted(m for m in reachable(graph, module, with_parents=True) if _within(m, forbidden))
        if bad:
            problems.append(f"importing {module} imports {', '.join(bad)}")
    return problems


@REAL_TREE
def test_contract_modules_import_nothing_from_engine_builtins_or_experiments():
    assert contract_problems(ROOT) == []


# -- rules 2 and 3: substrates and plugins ----------------------------------------------------------------------


@attrs.frozen
class Distribution:
    name: str  # the pyproject's project name
    package: str  # the import package under src/
    src: Path
    dependencies: frozenset[str]  # declared distribution names


def _dist_name(requirement: str) -> str:
    name = requirement
    for stop in "<>=!~;[ ":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-")


def distributions(folder: Path) -> list[Distribution]:
    out = []
    for project in sorted(folder.glob("*/pyproject.toml")):
        meta = tomllib.loads(project.read_text())["project"]
        src = project.parent / "src"
        for package in sorted(p.parent.name for p in src.glob("*/__init__.py")):
            out.append(Distribution(name=meta["name"].lower(), package=package, src=src,
                                    dependencies=frozenset(_dist_name(d) for d in meta.get("dependencies", ()))))
    return out


def layer_problems(substrates: list[Distribution], plugins: list[Distribution]) -> list[str]:
    plugin_of = {p.package: p for p in plugins}
    problems = []
    for dist in substrates + plugins:
        for imp in imports_of(modules_of(dist.src)):
            top = imp.target.split(".", 1)[0]
            other = plugin_of.get(top)
            if other is None or other.package == dist.package:
                continue
            where = f"{imp.source}:{imp.line}"
            if dist in substrates:
                problems.append(f"{where}: the substrate {dist.name} imports the plugin {other.package}")
            elif other.name not in dist.dependencies:
                problems.append(f"{where}: the plugin {dist.name} imports {other.package} without declaring "
                                f"{other.name} in its dependencies")
    return problems


@REAL_TREE
def test_no_substrate_imports_a_plugin_and_plugins_import_only_declared_plugins():
    assert layer_problems(distributions(ROOT / "substrates"), distributions(ROOT / "plugins")) == []


def example_problems(examples: Path, packages: Iterable[str]) -> list[str]:
    """A script under ``examples/`` that imports a plugin's or substrate's package is that method's script: it
    belongs in the plugin's ``repro/`` (issue 25), where its README names it."""
    owned = set(packages)
    problems = []
    for path in sorted(examples.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                if name.partition(".")[0] in owned:
                    problems.append(f"{path.relative_to(examples.parent)}:{node.lineno} imports {name}: a plugin's "
                                    "script lives in that plugin's repro/")
    return problems


@REAL_TREE
def test_examples_hold_no_plugin_specific_script():
    packages = [d.package for d in distributions(ROOT / "substrates") + distributions(ROOT / "plugins")]
    assert example_problems(ROOT / "examples", packages) == []


def test_the_examples_rule_names_a_plugin_script(tmp_path):
    _tree(tmp_path, {"examples/demo.py": "import fedcore\n",
                     "examples/paper/tables.py": "def f():\n    from fedcore_cos2p.share import Cos2pShare\n"})
    assert example_problems(tmp_path / "examples", ["fedcore_cos2p"]) == [
        "examples/paper/tables.py:2 imports fedcore_cos2p.share: a plugin's script lives in that plugin's repro/"]


# -- rule 4: no cycles among core modules at import time --------------------------------------------------------


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cycle_problems(src: Path, package: str = "fedcore", lazy_allowed: dict | None = None) -> list[str]:
    lazy_allowed = LAZY_CYCLE_BREAKERS if lazy_allowed is None else lazy_allowed
    modules = {m: p for m, p in modules_of(src).items() if m == package or m.startswith(package + ".")}
    found = imports_of(modules)
    graph = import_time_graph(found, modules)
    problems = [f"import cycle at import time: {' <-> '.join(c)}" for c in strongly_connected(graph)]
    breakers = {(i.source, i.target) for i in found
                if i.lazy and not i.typing_only and i.target in modules and i.source != i.target
                and i.source in reachable(graph, i.target)}
    for source, target in sorted(breakers - set(lazy_allowed)):
        problems.append(f"{source} imports {target} inside a function to dodge a cycle: list it in "
                        f"LAZY_CYCLE_BREAKERS with the reason, or remove the cycle")
    for source, target in sorted(set(lazy_allowed) - breakers):
        problems.append(f"LAZY_CYCLE_BREAKERS lists {source} -> {target}, which no longer dodges a cycle: drop it")
    return problems


@REAL_TREE
def test_no_import_cycle_among_core_modules_and_every_lazy_cycle_breaker_is_listed():
    assert cycle_problems(ROOT) == []


# -- rule 6: the core imports no substrate, no plugin, no peft or open_clip, and timm only lazily ------------------

CORE = ROOT / "fedcore"
NEVER = ("peft", "open_clip")          # not even inside a function
LAZY_ONLY = ("timm",)                  # inside a function body only


def _forbidden_top(name: str) -> bool:
    top = name.partition(".")[0]
    return top.startswith("fedcore_") or top in NEVER


def imports(source: str, filename: str) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) for every static or literal dynamic import of a source text (relative
    imports name no other layer)."""
    return [(f.name, f.line, f.in_function) for f in scan(source, filename)
            if f.kind != "from" or (f.level == 0 and f.name)]


def violations(source: str, filename: str) -> list[str]:
    out = []
    for module, line, in_function in imports(source, filename):
        top = module.partition(".")[0]
        if _forbidden_top(module):
            out.append(f"{filename}:{line}: imports {module}")
        elif top in LAZY_ONLY and not in_function:
            out.append(f"{filename}:{line}: imports {module} at import time (import it inside the function)")
    return out


@REAL_TREE
def test_no_core_module_imports_a_substrate_a_plugin_peft_or_open_clip():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 50
    bad = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)))]
    assert not bad, "the core must not import these:\n" + "\n".join(bad)


@pytest.mark.integration
def test_importing_every_core_module_loads_no_substrate_plugin_or_optional_backbone_library():
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        import fedcore
        for info in pkgutil.walk_packages(fedcore.__path__, "fedcore."):
            importlib.import_module(info.name)
        bad = sorted(m for m in sys.modules
                     if m.partition(".")[0].startswith("fedcore_")
                     or m.partition(".")[0] in ("peft", "open_clip", "timm"))
        print(len([m for m in sys.modules if m.startswith("fedcore.")]), bad)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    count, bad = out.stdout.strip().split(" ", 1)
    assert int(count) > 50 and bad == "[]", out.stdout


# -- each rule fails on a deliberately bad import ---------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("bad, expected", [
    ("from fedcore.engine.loop import Engine\n", "fedcore.hookspecs:1 imports fedcore.engine.loop at import time"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedcore.engine.client_job import ClientJob\n",
     "imports fedcore.engine.client_job for type checking"),
    ("def f():\n    from fedcore.builtin import FedAvg\n", "imports fedcore.builtin lazily"),
    ("from fedcore import helper\n", "importing fedcore.hookspecs imports fedcore.experiment"),
])
def test_the_contract_rule_fails_on_a_bad_import(tmp_path, bad, expected):
    base = {"fedcore/__init__.py": "", "fedcore/engine/__init__.py": "", "fedcore/engine/loop.py": "",
            "fedcore/engine/client_job.py": "", "fedcore/builtin/__init__.py": "", "fedcore/experiment/__init__.py": "",
            "fedcore/helper.py": "import fedcore.experiment\n", "fedcore/types.py": "from fedcore import markers\n",
            "fedcore/markers.py": ""}
    src = _tree(tmp_path, {**base, "fedcore/hookspecs.py": "from fedcore import types\n"})
    assert contract_problems(src) == []
    (src / "fedcore" / "hookspecs.py").write_text(bad)
    problems = contract_problems(src)
    assert any(expected in p for p in problems), problems


def _dist(root: Path, folder: str, name: str, package: str, deps: list[str], source: str) -> None:
    _tree(root / folder / name, {"pyproject.toml": f'[project]\nname = "{name}"\ndependencies = {deps!r}\n',
                                 f"src/{package}/__init__.py": source})


def test_the_substrate_and_plugin_rules_fail_on_bad_imports(tmp_path):
    _dist(tmp_path, "substrates", "fedcore-sub", "fedcore_sub", ["fedcore>=0.1"], "import fedcore\n")
    _dist(tmp_path, "plugins", "fedcore-a", "fedcore_a", ["fedcore>=0.1", "fedcore-b>=0.1,<0.2"],
          "from fedcore_b import thing\nimport fedcore_sub\n")
    _dist(tmp_path, "plugins", "fedcore-b", "fedcore_b", ["fedcore>=0.1"], "thing = 1\n")
    assert layer_problems(distributions(tmp_path / "substrates"), distributions(tmp_path / "plugins")) == []
    (tmp_path / "substrates/fedcore-sub/src/fedcore_sub/__init__.py").write_text("from fedcore_a import x\n")
    (tmp_path / "plugins/fedcore-b/src/fedcore_b/__init__.py").write_text("def f():\n    import fedcore_a\n")
    problems = layer_problems(distributions(tmp_path / "substrates"), distributions(tmp_path / "plugins"))
    assert problems == ["fedcore_sub:1: the substrate fedcore-sub imports the plugin fedcore_a",
                        "fedcore_b:2: the plugin fedcore-b imports fedcore_a without declaring fedcore-a in its "
                        "dependencies"]


def test_the_cycle_rule_fails_on_a_cycle_and_on_an_unlisted_lazy_cycle_breaker(tmp_path):
    src = _tree(tmp_path, {"fedcore/__init__.py": "from fedcore import a\n", "fedcore/a.py": "from fedcore import b\n",
                           "fedcore/b.py": "def later():\n    from fedcore import a\n"})
    assert cycle_problems(src, lazy_allowed={("fedcore.b", "fedcore.a"): "why"}) == []
    assert cycle_problems(src, lazy_allowed={}) == [
        "fedcore.b imports fedcore.a inside a function to dodge a cycle: list it in LAZY_CYCLE_BREAKERS with the "
        "reason, or remove the cycle"]
    (src / "fedcore" / "b.py").write_text("import fedcore.a\n")
    assert cycle_problems(src, lazy_allowed={}) == ["import cycle at import time: fedcore.a <-> fedcore.b"]
    (src / "fedcore" / "b.py").write_text("x = 1\n")
    assert cycle_problems(src, lazy_allowed={("fedcore.b", "fedcore.a"): "why"}) == [
        "LAZY_CYCLE_BREAKERS lists fedcore.b -> fedcore.a, which no longer dodges a cycle: drop it"]


@pytest.mark.parametrize("source, expected", [
    ("import fedcore_split", "imports fedcore_split"),
    ("from fedcore_lora.share import LoRAShare", "imports fedcore_lora.share"),
    ("def f():\n    import fedcore_clip.backbone", "imports fedcore_clip.backbone"),
    ("from fedcore_robust import TrimmedMean", "imports fedcore_robust"),
    ("def f():\n    from peft import LoraConfig", "imports peft"),
    ("import open_clip", "imports open_clip"),
    ("import importlib\nimportlib.import_module('fedcore_fedv.spsa')", "imports fedcore_fedv.spsa"),
    ("from timm.layers import ConvNormAct", "at import time"),
    ("class A:\n    import timm", "at import time"),
])
def test_the_scan_catches_each_kind_of_forbidden_import(source, expected):
    (found,) = violations(source, "fedcore/x.py")
    assert expected in found


def test_the_scan_allows_what_the_core_may_do():
    ok = ("import torch\nfrom fedcore.errors import ConfigError\n"
          "def f():\n    from timm.models import vision_transformer\n")
    assert violations(ok, "fedcore/x.py") == []
