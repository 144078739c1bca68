"""Write a generated results table into a README between two marker comments, so no table is typed by hand.

    replace_block(Path("plugins/fedcore-promptfl/README.md"), "promptfl-results", markdown)

replaces everything between ``<!-- generated:promptfl-results -->`` and ``<!-- /generated:promptfl-results -->``
(both must already be in the file, once each; a missing or repeated marker is an error, nothing is written).
"""
from __future__ import annotations

from pathlib import Path


def replace_block(readme: Path, tag: str, markdown: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- generated:{tag} -->", f"<!-- /generated:{tag} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"{readme} needs exactly one {start} followed by one {end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    readme.write_text(f"{head}{start}\n{markdown.strip()}\n{end}{tail}")

