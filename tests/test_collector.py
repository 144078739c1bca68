"""The garbage collector around a fedcore command's start-up (fedcore/_collector.py) and its process entry.

Only a process started for a fedcore command (``fedcore ...``, ``python -m fedcore...``) imports with the collector
off and freezes what it imported; any other importer (this pytest process) keeps its collector as it was.
``console()`` freezes before and after the command, never ``main`` (which tests and embedding code call).
"""
from __future__ import annotations

import gc
import sys

import pytest

from fedcore import _collector, cli


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(scope="module")
def _thawed():
    """The suite's conftest.py freezes what collection built: that is thawed for this module's collector tests and
    frozen again after them (with whatever they froze). Once per module, not per test: counting what is frozen
    walks every frozen object (~0.4 million here)."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()
    if frozen:
        gc.freeze()


@pytest.fixture
def clean_collector(_thawed):
    """A collector with nothing frozen, enabled; what the test froze is thawed after it."""
    gc.unfreeze()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    yield
    gc.unfreeze()
    gc.enable()


def collectable(*objects: object) -> list[bool]:
    """Per object: does a collection walk it (it is in a generation, not frozen)? Cheap after a ``gc.freeze()``,
    where only what was made since is in a generation (``gc.get_freeze_count`` walks every frozen object)."""
    walked = {id(o) for o in gc.get_objects()}
    return [id(o) in walked for o in objects]


def test_importing_fedcore_outside_a_command_left_the_collector_alone(clean_collector):
    # pytest imported fedcore before this test ran; sys.argv[0] is pytest's, so fedcore's imports ran unfrozen
    assert not _collector.command_process()
    with _collector.frozen_imports(_collector.command_process()):
        made = [Cycle() for _ in range(100)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    del made


@pytest.mark.parametrize("argv0, orig, command", [
    ("-m", ["python", "-m", "fedcore", "run"], True),  # while Python imports the package of python -m fedcore
    ("-m", ["python", "-X", "importtime", "-m", "fedcore.experiment.matrix"], True),
    ("-m", ["python", "-mfedcore", "run"], True),
    ("-m", ["python", "-m", "mytool", "run"], False),  # another module whose package imports fedcore
    ("-m", ["python", "-m", "fedcore_robust.repro"], False),
    ("/venv/bin/fedcore", ["/venv/bin/python", "/venv/bin/fedcore", "run"], True),
    ("/venv/bin/pytest", ["python", "/venv/bin/pytest"], False), ("train.py", ["python", "train.py"], False),
    ("/venv/bin/fedcore-report", ["python", "/venv/bin/fedcore-report"], False), ("", ["python"], False),
])
def test_a_command_process_is_python_m_fedcore_or_the_fedcore_script(monkeypatch, argv0, orig, command):
    monkeypatch.setattr(sys, "argv", [argv0, "run"])
    monkeypatch.setattr(sys, "orig_argv", orig)
    assert _collector.command_process() is command


def test_a_command_imports_without_collections_and_freezes_what_it_made(clean_collector):
    before = [g["collections"] for g in gc.get_stats()]
    with _collector.frozen_imports(True):
        assert not gc.isenabled()
        made = [Cycle() for _ in range(20_000)]  # far past the youngest generation's threshold
        assert [g["collections"] for g in gc.get_stats()] == before
    assert gc.isenabled()
    assert all(gc.is_tracked(x) for x in made) and not any(collectable(*made))  # frozen: no collection walks them
    del made


def test_other_processes_keep_their_collector(clean_collector):
    with _collector.frozen_imports(False):
        assert gc.isenabled()
        made = [Cycle() for _ in range(100)]
    assert gc.get_freeze_count() == 0
    del made
    gc.disable()
    with _collector.frozen_imports(True):
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == 0  # off stays off, nothing frozen
    gc.enable()
    keep = [Cycle() for _ in range(100)]
    gc.freeze()  # the process froze objects itself: a command's import leaves its choice alone
    before = Cycle()
    with _collector.frozen_imports(True):
        assert gc.isenabled()
        inside = Cycle()
    # nothing more frozen (on entry or exit) and nothing thawed
    assert collectable(before, inside, keep[0]) == [True, True, False]
    del keep


def test_a_failing_import_gives_the_collector_back(clean_collector):
    with pytest.raises(ImportError), _collector.frozen_imports(True):
        import fedcore_no_such_module  # noqa: F401
    assert gc.isenabled()


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
