"""The core imports no substrate and no plugin: layers point one way (core <- substrates <- plugins).

An AST scan of every module under ``fedcore/`` refuses a static import of ``fedcore_<anything>`` (the substrates
``fedcore_split``, ``fedcore_lora``, ``fedcore_clip`` and every plugin package), of peft and of open_clip, and
of timm anywhere but inside a function body (so ``import fedcore`` never needs timm). Literal
``importlib.import_module("...")`` / ``__import__("...")`` calls count as imports. A second check imports
every core module in a fresh interpreter and looks at ``sys.modules``.
"""
from __future__ import annotations

import ast
from pathlib import Path
import subprocess
import sys
import textwrap

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "fedcore"
NEVER = ("peft", "open_clip")          # not even inside a function
LAZY_ONLY = ("timm",)                  # inside a function body only


def _forbidden_top(name: str) -> bool:
    top = name.partition(".")[0]
    return top.startswith("fedcore_") or top in NEVER


def imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) for every static or literal dynamic import in ``tree``."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno, in_function))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.append((node.args[0].value, node.lineno, in_function))
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(tree, False)
    return found


def violations(source: str, filename: str) -> list[str]:
    out = []
    for module, line, in_function in imports(ast.parse(source, filename)):
        top = module.partition(".")[0]
        if _forbidden_top(module):
            out.append(f"{filename}:{line}: imports {module}")
        elif top in LAZY_ONLY and not in_function:
            out.append(f"{filename}:{line}: imports {module} at import time (import it inside the function)")
    return out


def test_no_core_module_imports_a_substrate_a_plugin_peft_or_open_clip():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 50
    bad = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)))]
    assert not bad, "the core must not import these:\n" + "\n".join(bad)


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
