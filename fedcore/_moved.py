"""Old import paths of code that left the core in 0.1.1, kept working until 1.0 with a DeprecationWarning.

``import fedcore.split`` (or ``from fedcore.lora import inject_lora``, ``fedcore.prompt.testing``, ...) gives
the very module object of the new place, ``fedcore_split`` (``fedcore_lora``, ``fedcore_clip.testing``), and
warns once, naming it. A finder at the front of ``sys.meta_path`` maps each old module name to its new
one and imports the new module by name when, and only when, the old name is imported: the core holds no
static import of a substrate or plugin. A package entry covers its submodules (``fedcore.split.stages`` ->
``fedcore_split.stages``) unless a more specific entry says otherwise.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import FrameType, ModuleType
from typing import Any
import warnings

from fedcore.first_party import distribution_of

REMOVED_IN = "1.0"

MOVED: dict[str, str] = {
    "fedcore.split": "fedcore_split",
    "fedcore.split.spsa": "fedcore_fedv.spsa",
    "fedcore.split.inversion": "fedcore_fedv.inversion",
    "fedcore.lora": "fedcore_lora",
    "fedcore.prompt": "fedcore_clip",
    "fedcore.schedules": "fedcore_safedlora.schedules",
}

# names a moved package used to export (or submodules ``from <package> import x`` found) that now live in another
# package: old package -> {name: dotted path of the object at its new place}
MOVED_NAMES: dict[str, dict[str, str]] = {
    "fedcore.split": {"SPSA": "fedcore_fedv.spsa.SPSA", "spsa": "fedcore_fedv.spsa",
                      "inversion": "fedcore_fedv.inversion"},
}


def new_name(old: str) -> str | None:
    """Where the module ``old`` lives now (None if it did not move)."""
    head, tail = old, ""
    while head:
        if head in MOVED:
            return MOVED[head] + tail
        head, dot, last = head.rpartition(".")
        tail = f"{dot}{last}{tail}"
    return None


def _warn(message: str) -> None:
    """A DeprecationWarning attributed to the importing code, not to the import machinery."""
    frame: FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None:  # count this module's frames; warnings skips the import machinery's by itself
        if frame.f_code.co_filename == __file__:
            level += 1
        elif not frame.f_code.co_filename.startswith("<frozen importlib"):
            break
        frame = frame.f_back
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _install_hint(new: str) -> str:
    dist = distribution_of(new)
    return f"pip install {dist}" if dist else f"install the distribution that provides {new}"


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module found under the new one (the same object, not a copy)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        try:
            module = importlib.import_module(self.new)
        except ModuleNotFoundError as exc:
            if exc.name == self.new.partition(".")[0]:  # the new package itself is missing, not a module in it
                raise ModuleNotFoundError(f"{self.old} moved to {self.new}, which is not installed: "
                                          f"{_install_hint(self.new)}", name=self.old) from None
            raise
        _warn(f"{self.old} moved to {self.new} ({_install_hint(self.new)}); "
              f"the old path works until fedcore {REMOVED_IN}")
        self._real_spec = module.__spec__
        if self.old in MOVED_NAMES:
            _forward_names(module, self.old, MOVED_NAMES[self.old])
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._real_spec  # the import system set it to the alias spec; the module keeps its own

    def get_code(self, fullname: str) -> Any:
        """The new module's code, so ``python -m fedcore.prompt.pretrain`` keeps working."""
        spec = _real_spec(self.new)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{fullname} moved to {self.new}, which has no code to run", name=fullname)
        _warn(f"{fullname} moved to {self.new}; run `python -m {self.new}`")
        return spec.loader.get_code(self.new)


def _real_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except ImportError:  # its package is missing: reported when the module is loaded
        return None


def _forward_names(module: ModuleType, old: str, names: dict[str, str]) -> None:
    """Let ``from <old> import NAME`` find a name that moved to another module, with a warning."""
    if "__getattr__" in module.__dict__:
        return

    def __getattr__(attr: str) -> Any:
        if attr not in names:
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}")
        path = names[attr]
        _warn(f"{old}.{attr} moved to {path} ({_install_hint(path)}); the old path works until fedcore {REMOVED_IN}")
        owner, _, name = path.rpartition(".")
        found = getattr(importlib.import_module(owner), name, None)
        return found if found is not None else importlib.import_module(path)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]


class MovedFinder(importlib.abc.MetaPathFinder):
    """Answers only for the old names in :data:`MOVED`; every other import goes on to the next finder."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("fedcore."):
            return None
        new = new_name(fullname)
        if new is None:
            return None
        real = _real_spec(new)  # its origin names the file ``python -m <old name>`` runs
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new), origin=real.origin if real else None)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): before the path finder, which would otherwise load a
    second copy of a moved submodule from the new package's ``__path__``."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
