"""The fields of the records hooks receive (contexts, server and client state), as Markdown generated from the attrs
classes, so the docs cannot drift from the code.

Each field is documented by the string literal under it in the class body (the attribute-docstring convention
Sphinx reads). ``python -m fedcore.field_docs docs/hooks.md`` rewrites the block between
``<!-- generated:context-fields -->`` and ``<!-- /generated:context-fields -->``; ``tests/test_field_docs.py`` fails
when the page and the classes disagree or a field has no docstring.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path
import sys
import textwrap

import attrs

TAG = "context-fields"


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its attribute docstring (the string literal right under it in ``cls``'s body)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split()).replace("``", "`")
    return docs


def fields_table(cls: type) -> str:
    """A Markdown table of ``cls``'s attrs fields: name, type, default, what it is."""
    docs = field_docs(cls)
    rows = [f"**`{cls.__name__}`** ({(cls.__doc__ or '').strip().splitlines()[0]})", "",
            "| field | type | default | what it is |", "|---|---|---|---|"]
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING:
            default = "required"
        elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
            default = f"`{getattr(f.default.factory, '__name__', 'factory')}()`"
        else:
            default = f"`{f.default!r}`"
        kind = str(f.type).replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{kind}` | {default} | {docs.get(f.name, '')} |")
    return "\n".join(rows)


def classes() -> list[type]:
    from fedcore.contexts import RoundContext, RunContext
    from fedcore.types import ClientState, ServerState

    return [RoundContext, RunContext, ServerState, ClientState]


def markdown() -> str:
    """Every class's table, in the order hooks meet them."""
    return "\n\n".join(fields_table(c) for c in classes())


def write(page: Path) -> None:
    """Replace the generated block of ``page`` (its markers must be there, once each)."""
    text = page.read_text()
    start, end = f"<!-- generated:{TAG} -->", f"<!-- /generated:{TAG} -->"
    if text.count(start) != 1 or text.count(end) != 1:
        raise SystemExit(f"{page}: needs {start} and {end} once each")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    page.write_text(f"{head}{start}\n{markdown()}\n{end}{tail}")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/hooks.md"))
