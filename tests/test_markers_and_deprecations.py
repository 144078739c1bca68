"""The markers' leaf module, and the names removed in 0.1.1 that keep working with a warning until 1.0."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fedcore
from fedcore import errors, hookspecs, markers

ROOT = Path(__file__).resolve().parents[1]


def test_markers_is_a_leaf_module():
    tree = ast.parse((ROOT / "fedcore" / "markers.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m == "fedcore" or m.startswith("fedcore.")], imported


def test_one_marker_of_each_kind():
    assert fedcore.hookimpl is markers.hookimpl
    assert hookspecs.hookspec is markers.hookspec
    assert markers.hookimpl.project_name == markers.hookspec.project_name == "fedcore"


@pytest.mark.parametrize(("module", "name", "hint"), [
    (fedcore, "InvalidUpdateError", "never raised"),
    (errors, "InvalidUpdateError", "never raised"),
    (errors, "ClientFailure", "never raised"),
    (errors, "check_choice", "setting"),
])
def test_removed_names_warn_and_still_work(module, name, hint):
    assert name not in module.__all__
    message = rf"{module.__name__}\.{name} is deprecated since fedcore 0\.1\.1 and will be removed in 1\.0: .*{hint}"
    with pytest.warns(DeprecationWarning, match=message):
        obj = getattr(module, name)
    if name == "check_choice":
        with pytest.raises(fedcore.ConfigError, match=r"mode='x' is not allowed; choose one of: 'a', 'b'"):
            obj("mode", "x", ["a", "b"])
    else:
        assert issubclass(obj, fedcore.FedcoreError)


def test_other_missing_names_are_plain_attribute_errors():
    with pytest.raises(AttributeError, match="module 'fedcore' has no attribute 'InvalidUpdate'"):
        fedcore.InvalidUpdate  # noqa: B018
    with pytest.raises(AttributeError, match="module 'fedcore.errors' has no attribute 'nope'"):
        errors.nope  # noqa: B018
