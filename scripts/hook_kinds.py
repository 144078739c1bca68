"""Write docs/hooks.md's table of hook kinds from fedcore.hookspecs.HOOK_KINDS (the kinds are stated once, there).

    python scripts/hook_kinds.py          # rewrite the block between the hook-kinds markers
    python scripts/hook_kinds.py --check  # exit 1 when the page differs (tests/test_hooks_meta.py checks the same)
"""
from __future__ import annotations

from pathlib import Path
import re
import sys

from fedcore.hookspecs import kinds_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
BLOCK = re.compile(r"(<!-- hook-kinds: begin[^>]*-->\n)(.*?)(<!-- hook-kinds: end -->)", re.S)


def render(text: str) -> str:
    if not BLOCK.search(text):
        raise SystemExit(f"{PAGE} lost its hook-kinds markers")
    return BLOCK.sub(lambda m: m.group(1) + kinds_table() + m.group(3), text)


def main(argv: list[str]) -> int:
    text = PAGE.read_text()
    wanted = render(text)
    if "--check" in argv:
        return 0 if wanted == text else 1
    PAGE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
