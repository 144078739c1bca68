"""Registration stays light: importing a plugin and describing what it registers imports no heavy library.

Every command that only asks about names (``fedcore --help``, ``plugins``, ``describe``, checking a config)
imports every installed plugin's registration module, so one plugin importing timm at the top of a module slows
all of them down (timm alone takes 1.6 s: torchvision, torch._dynamo, sympy...). A heavy library belongs inside
the factory or hook that builds with it (docs/plugins.md, "Registration stays light"). The check, for a plugin's
own tests (one fresh interpreter, a few seconds)::

    from fedcore.testing import heavy_imports

    def test_registration_imports_no_heavy_library():
        assert heavy_imports("fedcore_robust.plugin") == []

Each problem is one line naming the library and the imports that brought it in, outermost first, as far as
``-X importtime`` shows them (it does not time ``importlib.import_module``, so a chain can start below the
registration module); the module just before the heavy one is the one to change:
``timm: fedcore_distill.plugin > fedcore_distill > fedcore_distill.costs > timm.models.vision_transformer``.
"""
from __future__ import annotations

from collections.abc import Sequence
import re
import subprocess
import sys

HEAVY_LIBRARIES = ("timm", "peft", "open_clip", "transformers", "huggingface_hub", "torchvision", "datasets",
                   "pyarrow", "pandas", "ray", "matplotlib", "scipy", "sklearn", "PIL", "sympy", "triton",
                   "torch._dynamo")
"""Libraries (or torch's own heavy corners) that take a large share of a second or more to import; nothing that
only reads names may import them. torch itself, numpy, attrs, pluggy and rich are expected."""

MARK = "-- fedcore.testing.light_import: the plugins start here --"
_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|( *)(\S+)\s*$")


def _is_heavy(module: str, heavy: Sequence[str]) -> bool:
    return any(module == h or module.startswith(h + ".") for h in heavy)


def imported_heavy(importtime: str, heavy: Sequence[str] = HEAVY_LIBRARIES, *, after: str | None = None
                   ) -> list[str]:
    """The heavy libraries a ``python -X importtime`` run imported, one line each with the chain that imported it.

    Only lines after the line ``after`` count, when given. What ``import torch`` itself imports is torch's cost,
    not a plugin's: a library whose chain passes through ``torch`` is left out.
    """
    lines = importtime.splitlines()
    if after is not None:
        lines = lines[next((i + 1 for i, line in enumerate(lines) if line.strip() == after), len(lines)):]
    rows = []  # (depth, module) in the order imports finished: a module's imports come before it
    for line in lines:
        m = _LINE.match(line)
        if m:
            rows.append(((len(m.group(1)) - 1) // 2, m.group(2)))
    found: dict[str, str] = {}
    for i, (depth, module) in enumerate(rows):
        if not _is_heavy(module, heavy):
            continue
        chain, level = [module], depth
        for parent_depth, parent in rows[i + 1:]:  # the next shallower line is the importer, up to the top
            if parent_depth < level:
                chain.append(parent)
                level = parent_depth
                if level == 0:
                    break
        if "torch" in chain:
            continue
        shown: list[str] = []
        for step in reversed(chain):  # outermost first, down to the first heavy module (what to move)
            shown.append(step)
            if _is_heavy(step, heavy):
                break
        library = next(h for h in heavy if shown[-1] == h or shown[-1].startswith(h + "."))
        found.setdefault(library, " > ".join(shown))
    return [f"{library}: {chain}" for library, chain in sorted(found.items())]


_PROBE = f"""
import sys
import pluggy
import fedcore
from fedcore import hookspecs
from fedcore.describe import describe_entry
from fedcore.registry import ComponentRegistry
print({MARK!r}, file=sys.stderr, flush=True)
for name in sys.argv[1:]:
    __import__(name)  # not importlib.import_module: -X importtime times only the import statement's path
    module = sys.modules[name]
    pm = pluggy.PluginManager("fedcore")
    pm.add_hookspecs(hookspecs)
    pm.register(module, name=name)
    registry = ComponentRegistry()
    pm.hook.fedcore_register_components(registry=registry)
    for entry in registry.entries():  # what `fedcore plugins` and `fedcore describe` read
        entry.obj.describe() if entry.kind == "recipe" else describe_entry(entry)
"""


def heavy_imports(*modules: str, heavy: Sequence[str] = HEAVY_LIBRARIES, timeout: float = 300) -> list[str]:
    """Problems (``[]``: none) of importing each registration module in a fresh interpreter, registering its
    components and describing each one as ``fedcore describe`` does: every heavy library that brought in."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", _PROBE, *modules], capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        other = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
        raise AssertionError(f"importing {', '.join(modules)} failed:\n" + "\n".join(other[-20:]))
    return imported_heavy(proc.stderr, heavy, after=MARK)


__all__ = ["HEAVY_LIBRARIES", "heavy_imports", "imported_heavy"]
