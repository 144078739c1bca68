"""Moved: the contexts are public core types in :mod:`fedcore.contexts` (``fedcore.RunContext``,
``fedcore.RoundContext``).

This engine-internal path keeps working as a plain re-export.
"""
from fedcore.contexts import RoundContext, RunContext

__all__ = ["RoundContext", "RunContext"]
