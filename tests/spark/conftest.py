"""Every test here is a Spark test (marker ``spark``); the session fixture is tests/conftest.py's."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.spark)
