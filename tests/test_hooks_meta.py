"""Meta-tests (datasette style): every hookspec is documented in docs/hooks.md and exercised by a test_hook_* test."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
import re

import attrs
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
    stated = [h for kind in hookspecs.HOOK_KINDS for h in kind.hooks]
    assert sorted(stated) == hook_names(), "every hook has exactly one kind in hookspecs.HOOK_KINDS"


def kind_problems(kinds, spec_module) -> list[str]:
    """A hook whose kind says firstresult but whose spec does not (or the other way round) is filed wrongly."""
    problems = []
    for kind in kinds:
        for name in kind.hooks:
            opts = getattr(getattr(spec_module, name), "fedcore_spec", {})
            if bool(opts.get("firstresult")) != kind.firstresult:
                problems.append(f"{name} is filed as {kind.name} but its spec has "
                                f"firstresult={opts.get('firstresult')}")
    return problems


def test_every_hook_is_filed_under_the_kind_its_spec_declares():
    assert kind_problems(hookspecs.HOOK_KINDS, hookspecs) == []
    # fedcore_adapt_update filed with the observers again (as it once was) is caught
    kinds = {k.name: k for k in hookspecs.HOOK_KINDS}
    misfiled = (attrs.evolve(kinds["observer"], hooks=(*kinds["observer"].hooks, "fedcore_adapt_update")),)
    assert kind_problems(misfiled, hookspecs) == [
        "fedcore_adapt_update is filed as observer but its spec has firstresult=True"]


def test_the_kinds_table_in_docs_is_generated_from_the_spec():
    text = (ROOT / "docs" / "hooks.md").read_text()
    assert hookspecs.kinds_table() in text, "docs/hooks.md's kinds table is stale: run python scripts/hook_kinds.py"


def test_each_hook_is_documented_under_its_kinds_section():
    text = (ROOT / "docs" / "hooks.md").read_text()
    section = None
    where = {}
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        match = re.match(r"^### `(fedcore_[a-z_]+)\(", line)
        if match:
            where[match.group(1)] = section
    for kind in hookspecs.HOOK_KINDS:
        for name in kind.hooks:
            assert where.get(name) == f"{kind.name.capitalize()} hooks", \
                f"docs/hooks.md documents {name} under {where.get(name)!r}, not '{kind.name.capitalize()} hooks'"


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
