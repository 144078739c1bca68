"""The engine's runtime state has one owner: no engine module reaches into another object's attributes.

An AST scan of ``fedcore/engine/*.py`` holds three rules:

- only ``loop.py`` names the :class:`~fedcore.engine.loop.Engine` (no other module imports ``fedcore.engine.loop``,
  not even for type checking): dispatch, arrivals, record, snapshot and checkpoints take the
  :class:`~fedcore.engine.state.EngineState` and :class:`~fedcore.engine.state.EngineParts` and return values;
- no module reads or writes a private attribute (``x._name``) of anything but ``self`` / ``cls``;
- attribute writes go to ``self`` only, besides the listed bases below: the run's contract records that the engine
  fills by design (``RunContext``, ``ServerState``, ``ClientState``) and module-own or third-party globals.

The checker runs on a synthetic tree too, so each rule is shown to fail on a deliberately bad module.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[1] / "fedcore" / "engine"

WRITES_ALLOWED = {
    # (module, base of the written attribute): why
    ("loop.py", "run"): "set-up fills the RunContext (partition, clients, client states): the engine owns it",
    ("record.py", "server"): "aggregation advances ServerState.version, the global model's version",
    ("checkpoint.py", "server"): "resume puts ServerState.version and its server-state channel back",
    ("checkpoint.py", "cs"): "resume puts each ClientState's tensors and participation count back",
    ("checkpoint.py", "run.ledger"): "resume puts the ledger's rows back",
    ("ray_cluster.py", "constants"): "Ray's constant read at import, switched and restored around a local start",
}
PRIVATE_READS_ALLOWED = {
    ("idle.py", "other"): "IdleClients.__eq__ compares another IdleClients",
}


def ownership_problems(root: Path, *, writes_allowed: dict = WRITES_ALLOWED,
                       private_allowed: dict = PRIVATE_READS_ALLOWED) -> list[str]:
    problems = []
    for path in sorted(root.glob("*.py")):
        name = path.name
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "fedcore.engine.loop" and name != "loop.py":
                problems.append(f"{name}:{node.lineno}: imports fedcore.engine.loop (takes the Engine)")
            if isinstance(node, ast.Import) and name != "loop.py" and any(
                    a.name == "fedcore.engine.loop" for a in node.names):
                problems.append(f"{name}:{node.lineno}: imports fedcore.engine.loop (takes the Engine)")
            if isinstance(node, ast.Attribute):
                base = ast.unparse(node.value)
                private = node.attr.startswith("_") and not node.attr.startswith("__")
                if private and base not in ("self", "cls") and (name, base) not in private_allowed:
                    problems.append(f"{name}:{node.lineno}: touches the private {ast.unparse(node)}")
                if isinstance(node.ctx, (ast.Store, ast.Del)) and base not in ("self", "cls") \
                        and (name, base) not in writes_allowed:
                    problems.append(f"{name}:{node.lineno}: writes {ast.unparse(node)}")
    return problems


def test_no_engine_module_reaches_into_another_objects_attributes():
    assert ownership_problems(ENGINE) == []


def test_every_allowance_is_still_used():
    """An allowance nobody needs any more is removed, so the list stays the list of real exceptions."""
    for (name, base), why in {**WRITES_ALLOWED, **PRIVATE_READS_ALLOWED}.items():
        source = (ENGINE / name).read_text()
        assert f"{base}." in source, f"{name} no longer touches {base}.*; drop the allowance ({why})"


@pytest.mark.parametrize("bad, expected", [
    ("from fedcore.engine.loop import Engine\n", "imports fedcore.engine.loop"),
    ("def f(engine):\n    engine.now = 1.0\n", "writes engine.now"),
    ("def f(engine):\n    engine.state.arrived += [1]\n", "writes engine.state.arrived"),
    ("def f(engine):\n    return engine._scheduler\n", "touches the private engine._scheduler"),
    ("def f(run):\n    run._x = 1\n", "touches the private run._x"),
])
def test_the_scan_refuses_a_module_that_reaches_into_the_engine(tmp_path, bad, expected):
    (tmp_path / "good.py").write_text("class A:\n    def f(self):\n        self.x = 1\n        return self._y\n")
    assert ownership_problems(tmp_path) == []
    (tmp_path / "dispatch.py").write_text(bad)
    problems = ownership_problems(tmp_path)
    assert len(problems) >= 1 and all(p.startswith("dispatch.py:") for p in problems)
    assert any(expected in p for p in problems), problems
