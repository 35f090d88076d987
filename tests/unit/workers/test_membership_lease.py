"""The membership lease: lapses without answered heartbeats, renewed by each one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tests.fakes import FakeClock
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
    clock = FakeClock(100.0)
    lease = MembershipLease(session_timeout_s=10.0, clock=clock)
    coordinator = FakeCoordinator()
    lease.watch(app_with(coordinator))
    lease.watch(app_with(coordinator))  # a second assignment does not wrap it twice
    clock.now += 9.9
    assert lease.lapsed_s == 0
    clock.now += 0.2
    assert lease.lapsed_s > 0
    coordinator.answers = [False, True]
    assert asyncio.run(coordinator._do_heartbeat()) is False  # unanswered: still lapsed
    assert lease.lapsed_s > 0
    assert asyncio.run(coordinator._do_heartbeat()) is True
    assert lease.lapsed_s == 0
    assert coordinator.answers == []  # each call reached the real heartbeat once


def test_an_assignment_confirms_the_lease() -> None:
    clock = FakeClock(100.0)
    lease = MembershipLease(session_timeout_s=10.0, clock=clock)
    clock.now += 10.5
    assert lease.lapsed_s == 0.5
    lease.confirm()
    assert lease.lapsed_s == 0
