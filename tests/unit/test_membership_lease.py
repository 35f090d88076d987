"""The membership lease: lapses without answered heartbeats, renewed by each one."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from workers.faust_adapter import MembershipLease


class FakeCoordinator:
    def __init__(self) -> None:
        self.answers: list[bool] = []

    async def _do_heartbeat(self) -> bool:
        return self.answers.pop(0)


def app_with(coordinator: FakeCoordinator) -> Any:
    consumer = SimpleNamespace(_coordinator=coordinator)
    return SimpleNamespace(
        consumer=SimpleNamespace(_thread=SimpleNamespace(_ensure_consumer=lambda: consumer))
    )


def test_only_answered_heartbeats_renew_the_lease() -> None:
    lease = MembershipLease(session_timeout_s=0.05)
    coordinator = FakeCoordinator()
    lease.watch(app_with(coordinator))
    lease.watch(app_with(coordinator))  # a second assignment does not wrap it twice
    assert lease.lapsed_s == 0
    time.sleep(0.1)
    assert lease.lapsed_s > 0
    coordinator.answers = [False, True]
    assert asyncio.run(coordinator._do_heartbeat()) is False  # unanswered: still lapsed
    assert lease.lapsed_s > 0
    assert asyncio.run(coordinator._do_heartbeat()) is True
    assert lease.lapsed_s == 0
    assert coordinator.answers == []  # each call reached the real heartbeat once


def test_an_assignment_confirms_the_lease() -> None:
    lease = MembershipLease(session_timeout_s=0.05)
    time.sleep(0.1)
    assert lease.lapsed_s > 0
    lease.confirm()
    assert lease.lapsed_s == 0
