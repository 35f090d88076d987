"""An agent's batches in flight (workers/inflight.py): when the next one may start."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from workers.inflight import HandOffHook, InFlight


class Script:
    """Batches that hand off and finish when the test says so."""

    def __init__(self) -> None:
        self.hand_off: dict[str, HandOffHook] = {}
        self.finish: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    def batch(self, name: str, *, fail: bool = False) -> Callable[[HandOffHook], Awaitable[None]]:
        self.finish[name] = asyncio.Event()

        async def work(hand_off: HandOffHook) -> None:
            self.started.append(name)
            self.hand_off[name] = hand_off
            await self.finish[name].wait()
            if fail:
                raise RuntimeError(f"{name} failed")

        return work


async def _ready_now(in_flight: InFlight) -> bool:
    """Whether the next batch may start (without waiting for anything to change)."""
    waiter = asyncio.ensure_future(in_flight.ready())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    ready = waiter.done()
    waiter.cancel()
    return ready


async def _start(in_flight: InFlight, script: Script, name: str, *, fail: bool = False) -> None:
    """Start batch ``name`` once it may start, and let it run up to its wait."""
    await in_flight.ready()
    in_flight.launch(script.batch(name, fail=fail))
    await asyncio.sleep(0)


def test_the_next_batch_starts_at_the_last_ones_hand_off_not_its_end() -> None:
    async def scenario() -> None:
        script = Script()
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(2, group)
            await _start(in_flight, script, "a")
            assert not await _ready_now(in_flight), "a is still in the engine"
            script.hand_off["a"]()
            assert await _ready_now(in_flight), "a handed off: b may start while a publishes"
            in_flight.launch(script.batch("b"))
            await asyncio.sleep(0)
            script.finish["a"].set()  # a is through, b still in the engine
            await asyncio.sleep(0)
            assert not await _ready_now(in_flight), "an older batch's end does not release c"
            script.hand_off["b"]()
            assert await _ready_now(in_flight)
            script.finish["b"].set()
        assert script.started == ["a", "b"]

    asyncio.run(scenario())


def test_no_more_than_depth_batches_are_in_flight() -> None:
    async def scenario() -> None:
        script = Script()
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(2, group)
            for name in ("a", "b"):
                await _start(in_flight, script, name)
                script.hand_off[name]()  # both handed off, both still publishing
            assert not await _ready_now(in_flight), "two in flight: a third waits for a slot"
            with pytest.raises(RuntimeError, match="before ready"):
                in_flight.launch(script.batch("c"))
            script.finish["a"].set()
            assert await _ready_now(in_flight)
            script.finish["b"].set()

    asyncio.run(scenario())


def test_depth_one_runs_batches_start_to_end() -> None:
    async def scenario() -> None:
        script = Script()
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(1, group)
            await _start(in_flight, script, "a")
            script.hand_off["a"]()
            assert not await _ready_now(in_flight), "depth 1: the hand-off frees no slot"
            script.finish["a"].set()
            assert await _ready_now(in_flight)

    asyncio.run(scenario())


def test_a_batch_that_ends_without_handing_off_releases_the_next() -> None:
    async def scenario() -> None:
        script = Script()
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(2, group)
            await _start(in_flight, script, "a")
            script.finish["a"].set()  # e.g. its partitions moved before the engine
            assert await _ready_now(in_flight)

    asyncio.run(scenario())


def test_a_failing_batch_fails_the_agent() -> None:
    async def scenario() -> None:
        script = Script()
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(2, group)
            await _start(in_flight, script, "a", fail=True)
            script.finish["a"].set()
            await asyncio.sleep(3600)  # cancelled by the group when a fails

    with pytest.raises(ExceptionGroup) as failed:
        asyncio.run(scenario())
    assert failed.group_contains(RuntimeError, match="a failed")


def test_depth_must_be_positive() -> None:
    async def scenario() -> None:
        async with asyncio.TaskGroup() as group:
            with pytest.raises(ValueError, match="depth"):
                InFlight(0, group)

    asyncio.run(scenario())
