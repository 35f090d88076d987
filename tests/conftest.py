"""Test ordering: the first-run test goes first, then unit tests, then integration tests.

The first-run test proves a worker starts cleanly against a broker that has
never seen the project; it runs before anything else has created topics or
consumer groups on this machine (it has a stack of its own anyway). Unit
tests come next, so a broken build fails fast before the slow suites.

The chaos suite (``tests/chaos``, marker ``chaos``) runs only when the marker
expression names it (``make test-chaos``: ``pytest -m chaos``); plain
``pytest`` and ``make test`` leave it out.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "chaos" not in (config.getoption("markexpr") or ""):
        chaos = [item for item in items if item.get_closest_marker("chaos")]
        if chaos:
            config.hook.pytest_deselected(items=chaos)
            items[:] = [item for item in items if not item.get_closest_marker("chaos")]

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("first_run"):
            return 0
        return 2 if item.get_closest_marker("integration") else 1

    items.sort(key=rank)  # stable: the order within each rank is kept
