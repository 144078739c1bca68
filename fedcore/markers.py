"""The two pluggy markers of the ``fedcore`` project, in a leaf module that imports nothing from fedcore.

Plugins mark their hook implementations with ``@fedcore.hookimpl`` (re-exported from here); the core
marks its specifications with ``hookspec``. Keeping them here lets any module, including
``fedcore.hookspecs`` and the components inside the core, use them without an import cycle.
"""
from __future__ import annotations

import pluggy

PROJECT = "fedcore"
"""The pluggy project name: the attribute prefix pluggy reads (``fedcore_impl``, ``fedcore_spec``)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
hookspec = pluggy.HookspecMarker(PROJECT)

__all__ = ["PROJECT", "hookimpl", "hookspec"]
