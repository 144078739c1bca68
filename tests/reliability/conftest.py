"""The reliability battery: fast cases always run; ``reliability_long`` ones only with FEDCORE_RELIABILITY=all.

Run all of it (docs/reliability.md): ``FEDCORE_RELIABILITY=all scripts/dev test tests/reliability -q``.
"""
import os
from pathlib import Path
import sys

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "reliability_long: a long reliability case (run with FEDCORE_RELIABILITY=all)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FEDCORE_RELIABILITY") == "all":
        return
    skip = pytest.mark.skip(reason="long reliability case: run with FEDCORE_RELIABILITY=all")
    for item in items:
        if "reliability_long" in item.keywords:
            item.add_marker(skip)


# the cases import their shared helpers (battery.py) by name; pytest's importlib mode does not add this directory
sys.path.insert(0, str(Path(__file__).parent))
