"""Meta-tests (datasette style): every hookspec is documented in docs/hooks.md and exercised by a test_hook_* test."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
import re

import pytest

from fedcore import hookspecs

ROOT = Path(__file__).resolve().parents[1]


def hook_names() -> list[str]:
    return sorted(n for n, f in vars(hookspecs).items() if n.startswith("fedcore_") and callable(f))


def signature_of(name: str) -> str:
    """``name(arg, ...) -> Return``: the parameter names and the annotated return type, as written in hookspecs.py."""
    sig = inspect.signature(getattr(hookspecs, name))
    ret = sig.return_annotation
    ret = ret if isinstance(ret, str) else getattr(ret, "__name__", str(ret))
    return f"{name}({', '.join(sig.parameters)}) -> {ret}"


def documented_headings() -> set[str]:
    text = (ROOT / "docs" / "hooks.md").read_text()
    return {m.group(1).strip().strip("`") for m in re.finditer(r"^#{2,4} (.+)$", text, flags=re.M)}


def test_the_spec_list_is_complete():
    assert len(hook_names()) == 20
    assert set(hookspecs.SLOT_HOOKS.values()) | set(hookspecs.OBSERVER_HOOKS) | {
        "fedcore_register_components", "fedcore_addhooks"} == set(hook_names())


@pytest.mark.parametrize("name", hook_names())
def test_hookspec_has_a_heading_equal_to_its_signature(name):
    assert signature_of(name) in documented_headings(), f"docs/hooks.md needs a heading `{signature_of(name)}`"


def test_hook_tests_functions():
    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_hook_"):
                names |= set(re.findall(r"fedcore_[a-z_]+", ast.get_source_segment(source, node) or ""))
    missing = sorted(set(hook_names()) - names)
    assert not missing, f"hooks without a test_hook_* test: {missing}"
