"""The garbage collector around fedcore's start-up (fedcore/_collector.py) and the ``fedcore`` process entry.

``paused()`` must leave the collector exactly as it found it (on, off, or with objects the process froze itself)
while keeping every collection out of the block; ``console()`` freezes before and after the command, never
``main`` (which tests and embedding code call in their own long-lived process).
"""
from __future__ import annotations

import gc

import pytest

from fedcore import _collector, cli


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_paused_collects_nothing_inside_and_leaves_its_objects_collectable_in_the_oldest_generation():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    before = [g["collections"] for g in gc.get_stats()]
    with _collector.paused():
        assert not gc.isenabled()
        made = [Cycle() for _ in range(20_000)]  # far past the youngest generation's threshold
        ids = {id(x) for x in made}
        assert [g["collections"] for g in gc.get_stats()] == before
    assert gc.isenabled() and gc.get_freeze_count() == 0  # nothing stays frozen
    assert ids <= {id(o) for o in gc.get_objects(generation=2)}  # promoted unscanned, still tracked
    assert not ids & {id(o) for o in gc.get_objects(generation=0)}
    del made
    assert gc.collect() >= 20_000  # the cycles made inside are collected by the next full collection


def test_paused_leaves_a_disabled_collector_off_and_objects_the_process_froze_frozen():
    gc.disable()
    try:
        with _collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    keep = [Cycle() for _ in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with _collector.paused():
            assert gc.isenabled()  # not paused: its unfreeze would hand the process's frozen objects back
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    del keep


def test_paused_gives_the_collector_back_when_an_import_fails():
    with pytest.raises(ImportError), _collector.paused():
        import fedcore_no_such_module  # noqa: F401
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_console_freezes_around_the_command_and_main_does_not(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(cli, "main", lambda argv=None: calls.append("main") or 7)
    assert cli.console() == 7
    assert calls == ["freeze", "main", "freeze"]
    monkeypatch.undo()
    calls.clear()
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    assert cli.main(["describe", "fedavg", "--json"]) == 0
    assert calls == []
