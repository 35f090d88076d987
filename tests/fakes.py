"""Fakes shared by the unit tests."""

from __future__ import annotations

from typing import Generic, TypeVar

N = TypeVar("N", int, float)


class FakeClock(Generic[N]):
    """A clock that reads whatever the test set last: ``clock.now += 0.5``."""

    def __init__(self, now: N) -> None:
        self.now = now

    def __call__(self) -> N:
        return self.now
