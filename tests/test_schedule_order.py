"""The suite's scheduling order (the repository's ``conftest.py``): under ``--dist loadgroup
--no-loadscope-reorder`` pytest-xdist hands out groups in the order of their first collected test, so the long groups
must come first, longest first, and the short tests last, to fill in behind them (docs/testing.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def collected(pytester: pytest.Pytester) -> list[str]:
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makefile(".ini", pytest="[pytest]\nmarkers =\n    slow: slow\n    integration: integration\n")
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")
    return [line for line in result.outlines if "::" in line]


def test_long_groups_go_first_longest_first_then_long_modules_then_the_rest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_a_short="def test_short():\n    pass\n",
        test_b_docs=("import pytest\n\n@pytest.mark.slow\n@pytest.mark.xdist_group('docs:x')\ndef test_page():\n"
                     "    pass\n\ndef test_plain():\n    pass\n"),
        test_c_ray=("import pytest\n\n@pytest.mark.integration\n@pytest.mark.xdist_group('ray')\ndef test_cluster():\n"
                    "    pass\n\ndef test_bind():\n    pass\n"),
        test_d_slow=("import pytest\n\ndef test_first():\n    pass\n\n@pytest.mark.slow\ndef test_example():\n"
                     "    pass\n"),
        test_e_costs=("import pytest\n\n@pytest.mark.xdist_group('paper-costs')\ndef test_table():\n    pass\n\n"
                      "@pytest.mark.slow\ndef test_smoke():\n    pass\n"),
    )
    assert collected(pytester) == [
        "test_e_costs.py::test_table",     # LONG_GROUPS[0]: the longest group, though collected last
        "test_c_ray.py::test_cluster",     # a later LONG_GROUPS entry
        "test_b_docs.py::test_page",       # another group holding a slow test
        "test_d_slow.py::test_first",      # an ungrouped slow test's module, whole and in its own order
        "test_d_slow.py::test_example",
        "test_e_costs.py::test_smoke",
        "test_a_short.py::test_short",     # the short tests, in collection order
        "test_b_docs.py::test_plain",
        "test_c_ray.py::test_bind",
    ]
