"""Suite-wide test rules (docs/testing.md): the ``integration`` marker is enforced, and the long groups start first.

* A test that starts a process (a ``python`` or ``fedcore`` child, pip, a venv, a Ray cluster, a shell script) is
  marked ``integration``; ``scripts/dev test --quick`` leaves those out. An unmarked test that starts one fails
  here, naming the process, so the quick loop stays quick as tests are added.
* ``scripts/dev test`` runs the suite on pytest-xdist workers (``-n auto --dist loadgroup``). The longest groups
  (``LONG_GROUPS``, longest first) are collected first, then the other groups and modules holding integration or
  slow tests, then the rest, so the long tests start first and the many short ones fill in behind them; tests that
  share an expensive thing carry one ``xdist_group`` so one worker builds it once (see the groups in
  docs/testing.md).
"""
from __future__ import annotations

import gc
import os
from pathlib import Path
import subprocess
import sys
from typing import Any

import pytest

collect_ignore = ["tests/fixtures"]
"""Frozen third-party plugins (tests/fixtures/fedcore-robust-0.1.0): their own suites run against their own code
inside test_fresh_install's venv, never against the in-repo plugin of the same name."""

_started: list[str] = []
_FIRST = pytest.StashKey[int]()
_PROCESS_STARTERS = ("python", "bash", "sh", "pip", "fedcore", "ray", "gcs_server", "raylet")


def _program(args: Any) -> str:
    """A ``Popen`` call's command line (its first word is the program), shortened."""
    if isinstance(args, (str, bytes)):
        words = os.fsdecode(args).split()
    elif isinstance(args, os.PathLike):
        words = [os.fspath(args)]
    else:
        words = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in args]
    return " ".join(words)[:160]


def _starts_a_process_that_counts(command: str) -> bool:
    """Interpreters, shells, pip, Ray's servers: the starts that cost seconds. Quick probes (``uname``,
    ``fc-list``, ``ldconfig``, ``mount``) that libraries run on their own do not count."""
    first = command.split(" ", 1)[0]
    name = Path(first).name
    return first == sys.executable or "/ray/" in first or name.startswith(_PROCESS_STARTERS)


def pytest_configure(config: pytest.Config) -> None:
    # One intra-op torch thread per test process, and in the processes tests start (they inherit it): the suite's
    # models are tiny, and two OpenMP threads per process, two xdist workers on two cores, spin against each
    # other (the registered contract checks: 5x the CPU). A test about thread counts sets them itself.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    real_init = subprocess.Popen.__init__

    def recording_init(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        command = _program(args)
        if _starts_a_process_that_counts(command):
            _started.append(command)
        real_init(self, args, *rest, **kwargs)

    if not getattr(subprocess.Popen.__init__, "_fedcore_records", False):
        recording_init._fedcore_records = True  # type: ignore[attr-defined]
        subprocess.Popen.__init__ = recording_init  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    """No cyclic garbage collection while collecting, and what collection built frozen afterwards: importing torch,
    the plugins and every test module makes ~0.4 million objects that live all session, which the collector would
    otherwise walk at every full collection, during collection and during the tests (~7 % of a worker's CPU;
    frozen, the tests' collections walk only what the tests make). The tests then collect young objects every
    10,000 allocations, not 700: each young collection promotes survivors, and every tenth promotion of the middle
    generation walks everything the session keeps (cached backbones, data, modules' tables): ~45 full walks per
    worker took 2-2.8 s of each worker's 3-3.9 s of collecting; at 10,000, 2-3 walks, ~1 s in all (measured with
    gc.callbacks over a --quick run). Garbage in cycles lives a little longer; nothing else changes."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.set_threshold(10_000, 10, 10)
        gc.enable()


HARNESS_GROUPS = {"ray_cluster": "ray"}
"""Session fixtures that start something expensive -> the xdist group of the tests using them (one worker runs
them all, so the thing starts once per run). A test taking one is an integration test of that group."""

LONG_GROUPS = ("paper-costs", "recipe-matrix", "ray", "fresh-venv", "pretrained-tiny-clip")
"""The xdist groups that run longest, longest first (sum of their tests' times in the whole run at e6f31db, 2
workers: 83, 75, 64, 40 and 13 s). ``--dist loadgroup`` hands a worker a whole group at once, in collection order,
when the worker is nearly idle; a long group handed out late runs alone at the end of the run (a tail). So these go
out first, longest first, and everything else fills in behind them (see ``pytest_collection_modifyitems``)."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        groups = {HARNESS_GROUPS[f] for f in getattr(item, "fixturenames", ()) if f in HARNESS_GROUPS}
        for group in sorted(groups):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group(group))
        component = _checked_component(item)
        if component and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"checks:{item.path.name}:{component}"))
    # Scheduling order. scripts/dev runs xdist with --no-loadscope-reorder, so the groups (and the ungrouped tests,
    # one by one) go out in the order of their first test here. A unit keeps its best rank: a group goes out where
    # its most urgent test would, and an ungrouped test with its module (stable sort: modules stay together and in
    # their own order). xdist still hands an ungrouped test out on its own (its loadgroup scope is its node id), so a
    # module's tests run on both workers and a module-scoped fixture may be built on each: what must be built once
    # takes an xdist_group.
    rank: dict[object, tuple[int, int]] = {}
    for item in items:
        unit = _unit(item)
        rank[unit] = min(rank.get(unit, (9, 0)), _schedule_rank(item))
    items.sort(key=lambda item: rank[_unit(item)])


def _groups(item: pytest.Item) -> list[str]:
    return sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                   for m in item.iter_markers("xdist_group")})


def _unit(item: pytest.Item) -> object:
    """What is ranked as one: the test's xdist group(s) (handed out whole), or (ungrouped) its module."""
    groups = _groups(item)
    return "_".join(groups) if groups else item.path


def _schedule_rank(item: pytest.Item) -> tuple[int, int]:
    """How early a test should go out: (0, i) a test of the i-th of ``LONG_GROUPS`` (longest first); (1, 0) of
    another group holding integration or slow tests (a docs page, a catalogue); (2, 0) an ungrouped integration or
    slow test; (3, 0) the rest, the many short tests, which fill in behind the long ones so both workers end
    together."""
    groups = _groups(item)
    long = bool(item.get_closest_marker("integration") or item.get_closest_marker("slow"))
    listed = [LONG_GROUPS.index(g) for g in groups if g in LONG_GROUPS]
    if listed:
        return (0, min(listed))
    if groups:
        return (1, 0) if long else (3, 0)
    return (2, 0) if long else (3, 0)


def _checked_component(item: pytest.Item) -> str | None:
    """The component of a contract-check test (``parametrize_with_checks``, ``parametrize_registered``): its
    checks run on one worker, where the two run checks share one straight run (``fedcore.testing.resume``)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "-check_" not in callspec.id:
        return None
    if not getattr(callspec.params.get("check"), "__name__", "").startswith("check_"):
        return None
    return callspec.id.rsplit("-check_", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist sends the collected ids to the scheduler
def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep ``--dist loadgroup`` grouping. pytest-xdist 3.8 tells its scheduler a test's group by appending
    ``@group`` to the nodeid through ``item._nodeid``, which pytest 9.2 no longer reads (its nodeids are
    structured), so every group was silently spread over the workers (pytest-dev/pytest-xdist#1386). Until
    xdist writes the id pytest reads, do it here, exactly as xdist means to."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in session.items:
        names = _groups(item)
        grouped = "@" + "_".join(names).replace("[", "(").replace("]", ")")  # the scheduler splits at the last "]"
        nid = getattr(item, "_id", None)
        if names and isinstance(nid, NodeId) and nid.names and not item.nodeid.endswith(grouped):
            last = nid.names[-1] + (f"[{nid.params}]" if nid.params is not None else "") + grouped
            item._id = NodeId(path=nid.path, names=(*nid.names[:-1], last))  # reads back as nodeid + grouped


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_FIRST] = len(_started)


@pytest.fixture(autouse=True)
def _no_unmarked_processes_no_leaked_threads(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    node = request.node
    torch = sys.modules.get("torch")
    if torch is not None and threads is not None and torch.get_num_threads() != threads:
        left = torch.get_num_threads()
        torch.set_num_threads(threads)  # the next test on this worker starts as every test does
        pytest.fail(f"{node.nodeid} left torch with {left} threads (it had {threads}): restore them "
                    f"(fedcore_clip.testing.one_thread, or try/finally); tests run in any order (docs/testing.md)",
                    pytrace=False)
    if node.get_closest_marker("integration"):
        return
    new = _started[node.stash.get(_FIRST, len(_started)):]
    if new:
        pytest.fail(f"{node.nodeid} started a process ({new[0]!r}) but is not marked integration: mark it "
                    f"@pytest.mark.integration and let it join a shared harness (docs/testing.md)", pytrace=False)
