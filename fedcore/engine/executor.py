"""Moved: the executor protocol and the inline executor are public in :mod:`fedcore.jobs`
(``fedcore.jobs.Executor``, ``fedcore.jobs.InlineExecutor``).

This engine-internal path keeps working as a plain re-export.
"""
from fedcore.jobs import Executor, InlineExecutor

__all__ = ["Executor", "InlineExecutor"]
