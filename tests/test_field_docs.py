"""docs/hooks.md's tables of the contexts' and states' fields are generated from the attrs classes (issue 24 item 7)."""
from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from fedcore.field_docs import TAG, classes, field_docs, fields_table, markdown

ROOT = Path(__file__).resolve().parents[1]


def test_the_page_holds_exactly_what_the_classes_generate():
    text = (ROOT / "docs" / "hooks.md").read_text()
    block = text.split(f"<!-- generated:{TAG} -->\n", 1)[1].split(f"\n<!-- /generated:{TAG} -->", 1)[0]
    assert block == markdown(), "docs/hooks.md is stale: run python -m fedcore.field_docs docs/hooks.md"


@pytest.mark.parametrize("cls", classes(), ids=lambda c: c.__name__)
def test_every_field_has_a_docstring(cls):
    documented = field_docs(cls)
    missing = [f.name for f in attrs.fields(cls) if not documented.get(f.name)]
    assert not missing, f"{cls.__name__}: document these fields with a string literal under each: {missing}"


def test_an_undocumented_field_shows_up_empty():
    @attrs.define
    class Probe:
        """A probe."""

        a: int = 0
        """Documented."""
        b: int = 1

    assert field_docs(Probe) == {"a": "Documented."}
    assert fields_table(Probe).splitlines()[-1] == "| `b` | `int` | `1` |  |"
