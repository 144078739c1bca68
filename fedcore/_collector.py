"""The garbage collector while a fedcore command's process starts: its imports made without it, then frozen.

Importing fedcore imports torch: about 200,000 objects that live as long as the process. While they are made the
collector walks them again and again (three full collections and dozens of younger ones, ~0.25 s of CPU), later
full collections walk them once more each (~0.1 s), and so do the collections Python runs at exit (~0.45 s after a
run). A process started to run a fedcore command (``fedcore ...``, ``python -m fedcore ...``, ``python -m
fedcore.<module>``) ends with it, so it imports with the collector off and then freezes what it imported
(``gc.freeze``): those objects are never walked, and everything made later is collected as usual. The command
freezes again when it returns (:func:`fedcore.cli.console`). Any other process importing fedcore (a script, a
notebook, pytest) keeps its collector exactly as it was: a frozen object is never collected, and objects the
importer made before ``import fedcore`` are not fedcore's to freeze.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import gc
import os
import sys


def command_process() -> bool:
    """Whether this interpreter was started to run a fedcore command: the ``fedcore`` script, or ``python -m
    fedcore[.module]`` (while Python imports that module's packages ``sys.argv[0]`` is ``"-m"``; the module's name
    is in ``sys.orig_argv``)."""
    argv = getattr(sys, "argv", None) or [""]
    if argv[0] != "-m":
        return os.path.basename(argv[0]) == "fedcore"
    module, orig = "", list(getattr(sys, "orig_argv", ()))
    for i, arg in enumerate(orig[1:], start=1):
        if arg.startswith("-m"):
            module = arg[2:] or (orig[i + 1] if i + 1 < len(orig) else "")
            break
    return module.partition(".")[0] == "fedcore"


@contextmanager
def frozen_imports(command: bool) -> Iterator[None]:
    """``command``: no collection inside the block, and every object then alive frozen after it. Otherwise (and
    when the collector is off, or the process froze objects itself) the collector is left alone."""
    if not command or not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
