"""The benchmarks' own tests are slow: each runs a benchmark's core at its smallest size, some
with servers and a model of their own. They run in `make test-slow` (and `make test-services`),
not in `make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test in this folder, whichever conftest collected it.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.slow)
