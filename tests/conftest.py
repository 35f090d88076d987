"""Test ordering: the first-run test goes first, then unit tests, then integration tests.

The first-run test proves a worker starts cleanly against a broker that has
never seen the project; it runs before anything else has created topics or
consumer groups on this machine (it has a stack of its own anyway). Unit
tests come next, so a broken build fails fast before the slow suites.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("first_run"):
            return 0
        return 2 if item.get_closest_marker("integration") else 1

    items.sort(key=rank)  # stable: the order within each rank is kept
