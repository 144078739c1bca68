"""Does this environment hold THIS checkout's packages, installed editable? (``scripts/dev``'s reinstall skip)

The cached environment is shared by every checkout with the same requirements file (CI, fresh clones, worktrees),
so its editable installs may point at another checkout: then every test would run the other checkout's code. The
environment holds this checkout's packages when, read from its installed metadata (what pip wrote, not a stamp
another script may not have updated):

* fedcore and every project under ``substrates/`` and ``plugins/`` is installed, editable, from its directory in
  this checkout (``direct_url.json``), with the version and entry points its ``pyproject.toml`` declares now;
* no other editable ``fedcore*`` distribution is installed (a plugin another checkout has and this one lacks
  would be discovered through its entry point).

Run by the environment's interpreter from the checkout's root: exit 0 when it holds them; otherwise exit 1, the
problems on stderr (one line each) and the names of the stray distributions to uninstall on stdout.
"""
from __future__ import annotations

from collections.abc import Iterable
import importlib.metadata as md
import json
from pathlib import Path
import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def projects(root: Path) -> dict[str, tuple[Path, dict]]:
    """canonical distribution name -> (its directory, its ``[project]`` table), for the checkout at ``root``."""
    found = {}
    for pyproject in [root / "pyproject.toml", *sorted(root.glob("substrates/*/pyproject.toml")),
                      *sorted(root.glob("plugins/*/pyproject.toml"))]:
        project = tomllib.loads(pyproject.read_text())["project"]
        found[canonical(project["name"])] = (pyproject.parent.resolve(), project)
    return found


def declared_entry_points(project: dict) -> set[tuple[str, str, str]]:
    points = {("console_scripts", name, value) for name, value in project.get("scripts", {}).items()}
    points |= {("gui_scripts", name, value) for name, value in project.get("gui-scripts", {}).items()}
    for group, entries in project.get("entry-points", {}).items():
        points |= {(group, name, value) for name, value in entries.items()}
    return points


def editable_directory(dist: md.Distribution) -> Path | None:
    """The directory an editable install points at (``None``: not an editable install)."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    info = json.loads(text)
    url = info.get("url", "")
    if not info.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    return Path(url.removeprefix("file://")).resolve()


def problems(root: Path, installed: Iterable[md.Distribution]) -> tuple[list[str], list[str]]:
    """(one line per way the installed distributions differ from the checkout at ``root``, names of editable
    ``fedcore*`` distributions the checkout does not have)."""
    want = projects(root)
    seen: dict[str, md.Distribution] = {}
    for dist in installed:
        seen.setdefault(canonical(dist.metadata["Name"] or ""), dist)  # the first on the path is the one imported
    lines, strays = [], []
    for name, (directory, project) in want.items():
        held = seen.get(name)
        if held is None:
            lines.append(f"{name}: not installed")
            continue
        at = editable_directory(held)
        if at != directory:
            lines.append(f"{name}: installed from {at or 'a non-editable build'}, not {directory}")
            continue
        if held.version != project.get("version"):
            lines.append(f"{name}: installed version {held.version}, pyproject.toml says {project.get('version')}")
        have = {(ep.group, ep.name, ep.value) for ep in held.entry_points}
        if have != declared_entry_points(project):
            lines.append(f"{name}: installed entry points differ from pyproject.toml's")
    for name, dist in sorted(seen.items()):
        if name.startswith("fedcore") and name not in want and editable_directory(dist) is not None:
            lines.append(f"{name}: installed editable from {editable_directory(dist)}, which this checkout lacks")
            strays.append(dist.metadata["Name"])
    return lines, strays


def main() -> int:
    lines, strays = problems(Path.cwd(), md.distributions())
    for line in lines:
        print(f"[dev] {line}", file=sys.stderr)
    for name in strays:
        print(name)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
