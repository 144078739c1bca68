"""The version policy of docs/plugins.md §13: the 0.1 line until 1.0, plugins pin ``fedcore>=0.1,<1``.

The package version, CHANGELOG's top section and the documented pin agree; the pin of the old docs (the frozen
fixture plugin's ``<0.2``) still admits the current version; every deprecation names 1.0 as its removal.
"""
from __future__ import annotations

from pathlib import Path
import re

from packaging.requirements import Requirement
from packaging.version import Version
import pytest
import tomllib

import fedcore

ROOT = Path(__file__).resolve().parents[1]
DOCS_PIN = "fedcore>=0.1,<1"


def _pins(pyproject: Path) -> list[Requirement]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [r for r in map(Requirement, deps) if r.name == "fedcore"]


def test_package_version_changelog_and_docs_pin_agree():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert fedcore.__version__ == version
    top = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    assert re.fullmatch(rf"## {re.escape(version)}( \(unreleased\)| \(\d{{4}}-\d\d-\d\d\))", top), top
    assert Version(version).release[:2] == (0, 1), "the policy keeps the 0.1 line until 1.0"
    plugins_md = (ROOT / "docs" / "plugins.md").read_text()
    documented = re.findall(r'"(fedcore[<>=!~][^"]*)"', plugins_md)
    assert documented and set(documented) == {DOCS_PIN}, documented
    assert Requirement(DOCS_PIN).specifier.contains(version)


def test_every_first_party_distribution_pins_the_policy_and_the_old_pin_still_admits_this_version():
    tomls = sorted(ROOT.glob("plugins/*/pyproject.toml")) + sorted(ROOT.glob("substrates/*/pyproject.toml"))
    assert len(tomls) >= 15
    for toml in tomls:
        assert [str(r.specifier) for r in _pins(toml)] == [str(Requirement(DOCS_PIN).specifier)], toml
    (old,) = _pins(ROOT / "tests" / "fixtures" / "fedcore-robust-0.1.0" / "pyproject.toml")
    assert old.specifier.contains(fedcore.__version__), f"{old} refuses fedcore {fedcore.__version__}"


def test_deprecations_name_1_0_as_their_removal():
    from fedcore import _moved, errors

    with pytest.warns(DeprecationWarning, match=r"will be removed in 1\.0: "):
        errors.check_choice  # noqa: B018 (the attribute access is what warns)
    assert _moved.REMOVED_IN == "1.0"
    stale = []
    sources = [*ROOT.glob("fedcore/**/*.py"), *ROOT.glob("substrates/*/src/**/*.py"),
               *ROOT.glob("plugins/*/src/**/*.py")]
    for path in sources:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(removed in|until|goes in) (fedcore )?0\.[2-9]", line):
                stale.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not stale, "deprecations must name 1.0 as their removal:\n" + "\n".join(stale)
