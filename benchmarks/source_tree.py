"""Run fedcore and every first-party plugin from a checkout that pip never installed (a lent GPU machine).

    import source_tree; source_tree.activate()      # before the first ``import fedcore``

fedcore finds its plugins through entry points (``importlib.metadata``, group ``fedcore``), which exist only where
a distribution was installed: with ``PYTHONPATH`` alone a source tree offers its built-in components and nothing
else. :func:`activate` puts the checkout's packages on ``sys.path`` (``.``, ``substrates/*/src``,
``plugins/*/src``) and writes, into a scratch folder also on the path, a ``<name>-<version>.dist-info`` per
``pyproject.toml`` holding what the catalogue reads: the name, the version, the entry points and the top-level
packages. No build, no pip, no setuptools; milliseconds. ``PYTHONPATH`` is set too, so child processes (pytest,
``python -m fedcore``) see the same. Third-party packages (tomli_w, open_clip, ...) still come from the interpreter's
environment or from carried wheels (``scripts/gpu-wheels``).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
import re
import sys
import tempfile

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
"""The checkout this file belongs to."""


def projects(root: Path = ROOT) -> list[Path]:
    """Every first-party project folder (one ``pyproject.toml`` each): the core, the substrates, the plugins."""
    found = [root] + sorted(p.parent for p in root.glob("substrates/*/pyproject.toml"))
    return found + sorted(p.parent for p in root.glob("plugins/*/pyproject.toml"))


def package_dir(project: Path) -> Path:
    """Where a project's import packages live: ``src/`` when it has one (substrates, plugins), else the folder."""
    return project / "src" if (project / "src").is_dir() else project


def top_level(project: Path, meta: dict) -> list[str]:
    """The import packages a project ships (its ``[tool.setuptools.packages.find] include`` when given)."""
    where = package_dir(project)
    include = meta.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include")
    names = sorted(p.parent.name for p in where.glob("*/__init__.py"))
    if include:
        patterns = [re.compile(pat.replace(".", r"\.").replace("*", ".*") + "$") for pat in include]
        names = [n for n in names if any(p.match(n) for p in patterns)]
    return names


def dist_info(project: Path, into: Path) -> Path:
    """Write ``<name>-<version>.dist-info`` of ``project`` into ``into``: METADATA, entry_points.txt, top_level.txt."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    info = meta["project"]
    name, version = info["name"], info.get("version", "0")
    folder = into / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = info.get("entry-points", {})
    lines = []
    for group, points in sorted(groups.items()):
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in sorted(points.items())]
        lines.append("")
    scripts = info.get("scripts", {})
    if scripts:
        lines += ["[console_scripts]", *[f"{k} = {v}" for k, v in sorted(scripts.items())], ""]
    (folder / "entry_points.txt").write_text("\n".join(lines))
    (folder / "top_level.txt").write_text("".join(f"{n}\n" for n in top_level(project, meta)))
    return folder


def installed_here(root: Path = ROOT) -> bool:
    """Whether ``fedcore`` already imports from this checkout with its plugins' entry points (an editable install)."""
    from importlib import metadata

    spec = importlib.util.find_spec("fedcore")
    if spec is None or spec.origin is None or not Path(spec.origin).resolve().is_relative_to(root.resolve()):
        return False
    return any(ep.name == "clip" for ep in metadata.entry_points(group="fedcore"))


def activate(root: Path = ROOT, *, into: Path | None = None, force: bool = False) -> list[str]:
    """Make the checkout importable with its entry points; returns the folders put first on ``sys.path``.

    Nothing is done when an editable install of this very checkout is active (``force`` does it anyway).
    ``into`` is the scratch folder for the metadata (default: a fresh temporary folder).
    """
    if not force and installed_here(root):
        return []
    shim = Path(into) if into is not None else Path(tempfile.mkdtemp(prefix="fedcore-source-tree-"))
    for project in projects(root):
        dist_info(project, shim)
    paths = [str(shim)] + [str(package_dir(p)) for p in projects(root)]
    sys.path[:0] = [p for p in paths if p not in sys.path]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    importlib.invalidate_caches()
    if "fedcore.plugins" in sys.modules:  # discovered before the metadata existed: read the entry points again
        sys.modules["fedcore.plugins"].refresh()
    return paths


__all__ = ["ROOT", "activate", "dist_info", "installed_here", "package_dir", "projects", "top_level"]
