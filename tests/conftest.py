"""Test ordering: the first-run test goes first, then unit tests, then integration tests.

The first-run test proves a worker starts cleanly against a broker that has
never seen the project; it runs before anything else has created topics or
consumer groups on this machine (it has a stack of its own anyway). Unit
tests come next, so a broken build fails fast before the slow suites.

The chaos suite (``tests/chaos``, marker ``chaos``) and the benchmark commands'
suite (``tests/bench``, marker ``bench``) run only when the marker expression
names them (``make test-chaos``, ``make test-bench``); plain ``pytest`` and
``make test`` leave them out. Each has stacks of its own, so CI runs them beside
``make test``.
"""

from __future__ import annotations

import pytest

# --burn-cores N (make test-loaded): the suite under a CPU burner
pytest_plugins = ["tests.cpu_burner"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for suite in ("chaos", "bench"):
        if suite not in (config.getoption("markexpr") or ""):
            apart = [item for item in items if item.get_closest_marker(suite)]
            if apart:
                config.hook.pytest_deselected(items=apart)
                items[:] = [item for item in items if not item.get_closest_marker(suite)]

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("first_run"):
            return 0
        return 2 if item.get_closest_marker("integration") else 1

    items.sort(key=rank)  # stable: the order within each rank is kept
