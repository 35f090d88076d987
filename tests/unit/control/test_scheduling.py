"""PriorityGate: interactive before bulk, no more calls than replicas, even under cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from pathlib import Path

import pytest

from pipeline.control.priority import BULK, INTERACTIVE, HoldFile, PriorityGate


async def _run_order() -> list[str]:
    gate = PriorityGate()
    order: list[str] = []

    async def work(name: str) -> None:
        order.append(name)
        await asyncio.sleep(0.01)

    first = asyncio.create_task(gate.run(BULK, work("bulk-running")))
    await asyncio.sleep(0)  # it holds the gate now
    waiting = [
        asyncio.create_task(gate.run(BULK, work("bulk-1"))),
        asyncio.create_task(gate.run(BULK, work("bulk-2"))),
        asyncio.create_task(gate.run(INTERACTIVE, work("interactive-1"))),
        asyncio.create_task(gate.run(INTERACTIVE, work("interactive-2"))),
    ]
    await asyncio.gather(first, *waiting)
    return order


def test_interactive_jumps_the_queue_but_running_work_finishes() -> None:
    assert asyncio.run(_run_order()) == [
        "bulk-running",
        "interactive-1",
        "interactive-2",
        "bulk-1",
        "bulk-2",
    ]


def test_cancelled_waiter_does_not_block_the_gate() -> None:
    async def scenario() -> int:
        gate = PriorityGate()
        release = asyncio.Event()
        holder = asyncio.create_task(gate.run(BULK, release.wait()))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(gate.run(INTERACTIVE, asyncio.sleep(0)))
        await asyncio.sleep(0)
        waiter.cancel()
        release.set()
        await holder
        return await gate.run(BULK, asyncio.sleep(0, result=7))

    assert asyncio.run(asyncio.wait_for(scenario(), 2)) == 7


def test_cancelling_a_caller_keeps_the_gate_until_the_engine_thread_returns() -> None:
    """A rebalance cancels the batch, but the executor thread runs on: no overlap allowed."""
    running = threading.Semaphore(1)
    inside = threading.Event()
    overlaps: list[str] = []

    def engine_call(name: str) -> str:
        if not running.acquire(blocking=False):
            overlaps.append(name)
            return name
        inside.set()
        try:
            time.sleep(0.2)  # the engine holds the call a while after its caller is cancelled
            return name
        finally:
            running.release()

    async def scenario() -> str:
        gate = PriorityGate()
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(
            gate.run(INTERACTIVE, loop.run_in_executor(None, engine_call, "first"))
        )
        assert await asyncio.to_thread(inside.wait, 5), "the first call reached the engine"
        first.cancel()
        return await gate.run(INTERACTIVE, _in_executor(engine_call, "second"))

    async def _in_executor(fn: object, name: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(None, engine_call, name)

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == "second"
    assert overlaps == []


def test_with_two_replicas_interactive_runs_beside_bulk_and_bulk_keeps_to_one() -> None:
    async def scenario() -> list[str]:
        gate = PriorityGate(2)
        events: list[str] = []
        release_bulk = asyncio.Event()

        async def work(name: str, until: asyncio.Event | None = None) -> None:
            events.append(f"start {name}")
            if until is not None:
                await until.wait()
            else:
                await asyncio.sleep(0.01)
            events.append(f"end {name}")

        bulk_1 = asyncio.create_task(gate.run(BULK, work("bulk-1", release_bulk)))
        await asyncio.sleep(0)
        bulk_2 = asyncio.create_task(gate.run(BULK, work("bulk-2")))
        interactive = asyncio.create_task(gate.run(INTERACTIVE, work("interactive")))
        await interactive  # ran and finished while bulk-1 still holds its replica
        events.append("interactive done")
        release_bulk.set()
        await asyncio.gather(bulk_1, bulk_2)
        return events

    assert asyncio.run(asyncio.wait_for(scenario(), 2)) == [
        "start bulk-1",
        "start interactive",
        "end interactive",
        "interactive done",
        "end bulk-1",
        "start bulk-2",  # waited for bulk-1 although a replica was free
        "end bulk-2",
    ]


def test_interactive_uses_every_replica() -> None:
    async def scenario() -> int:
        gate = PriorityGate(3)
        running = peak = 0

        async def work() -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

        await asyncio.gather(*(gate.run(INTERACTIVE, work()) for _ in range(6)))
        return peak

    assert asyncio.run(asyncio.wait_for(scenario(), 2)) == 3


def test_calls_never_exceed_replicas_nor_bulk_its_share_under_mixed_load() -> None:
    async def scenario(replicas: int) -> tuple[int, int, list[int]]:
        gate = PriorityGate(replicas)
        rng = random.Random(replicas)
        held = {INTERACTIVE: 0, BULK: 0}
        peak_all = peak_bulk = 0
        finished: list[int] = []

        async def work(priority: int, i: int) -> None:
            nonlocal peak_all, peak_bulk
            held[priority] += 1
            peak_all = max(peak_all, sum(held.values()))
            peak_bulk = max(peak_bulk, held[BULK])
            await asyncio.sleep(rng.random() / 200)
            held[priority] -= 1
            finished.append(i)

        async def caller(i: int) -> None:
            await asyncio.sleep(rng.random() / 50)
            priority = BULK if i % 2 else INTERACTIVE
            task = asyncio.ensure_future(gate.run(priority, work(priority, i)))
            if i % 7 == 0:  # some callers give up while waiting or running
                await asyncio.sleep(rng.random() / 300)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        await asyncio.gather(*(caller(i) for i in range(200)))
        await asyncio.sleep(0.05)  # cancelled calls already running finish
        assert gate.waiting == 0
        return peak_all, peak_bulk, finished

    for replicas in (1, 2, 3):
        peak_all, peak_bulk, finished = asyncio.run(asyncio.wait_for(scenario(replicas), 10))
        assert peak_all == replicas
        assert peak_bulk == max(1, replicas - 1)
        # every caller that was not cancelled got its call run
        assert set(range(200)) - {i for i in range(200) if i % 7 == 0} <= set(finished)


def test_a_gate_needs_a_replica() -> None:
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        PriorityGate(0)


def test_the_share_of_each_priority() -> None:
    assert (PriorityGate(1).share(INTERACTIVE), PriorityGate(1).share(BULK)) == (1, 1)
    assert (PriorityGate(2).share(INTERACTIVE), PriorityGate(2).share(BULK)) == (2, 1)
    assert PriorityGate(3).replicas == 3 and PriorityGate(3).share(BULK) == 2


def test_a_held_gate_starts_nothing_then_serves_its_waiters_by_priority(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()

    async def scenario() -> tuple[list[str], list[str]]:
        gate = PriorityGate(2, HoldFile(hold, poll_s=0.01))
        order: list[str] = []

        async def work(name: str) -> None:
            order.append(name)
            await asyncio.sleep(0.01)

        names = ["bulk-1", "interactive-1", "bulk-2", "interactive-2"]
        tasks = [
            asyncio.create_task(gate.run(BULK if n.startswith("bulk") else INTERACTIVE, work(n)))
            for n in names
        ]
        await asyncio.sleep(0.1)
        while_held = list(order)
        assert gate.waiting == len(names)
        hold.unlink()
        await asyncio.gather(*tasks)
        return while_held, order

    while_held, order = asyncio.run(asyncio.wait_for(scenario(), 5))
    assert while_held == []
    assert order == ["interactive-1", "interactive-2", "bulk-1", "bulk-2"]


def test_a_gate_held_while_a_call_runs_serves_the_next_once_released(tmp_path: Path) -> None:
    hold = tmp_path / "hold"

    async def scenario() -> list[str]:
        gate = PriorityGate(1, HoldFile(hold, poll_s=0.01))
        release = asyncio.Event()
        order: list[str] = []

        async def work(name: str) -> None:
            order.append(name)

        running = asyncio.create_task(gate.run(BULK, release.wait()))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(gate.run(INTERACTIVE, work("next")))
        await asyncio.sleep(0)
        hold.touch()
        release.set()  # the replica frees while the gate is held
        await running
        await asyncio.sleep(0.05)
        assert order == []
        hold.unlink()
        await waiter
        return order

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == ["next"]


def test_bulk_does_not_start_beside_interactive_work() -> None:
    """A free replica goes unused by bulk while interactive work runs: beside it, a bulk
    call would take the cores the interactive call and the event loop need."""

    async def scenario() -> list[str]:
        gate = PriorityGate(2, bulk_yield_max_s=60)
        events: list[str] = []
        release = asyncio.Event()

        async def work(name: str, until: asyncio.Event | None = None) -> None:
            events.append(f"start {name}")
            if until is not None:
                await until.wait()
            events.append(f"end {name}")

        interactive = asyncio.create_task(gate.run(INTERACTIVE, work("interactive", release)))
        await asyncio.sleep(0)
        bulk = asyncio.create_task(gate.run(BULK, work("bulk")))
        await asyncio.sleep(0.05)
        events.append("bulk still waiting" if not bulk.done() else "bulk ran")
        release.set()
        await asyncio.gather(interactive, bulk)
        return events

    assert asyncio.run(asyncio.wait_for(scenario(), 2)) == [
        "start interactive",
        "bulk still waiting",
        "end interactive",
        "start bulk",
        "end bulk",
    ]


def test_bulk_that_waited_long_enough_takes_its_share_beside_interactive_work() -> None:
    """Saturating interactive traffic slows bulk work but does not stop it."""

    async def scenario() -> list[str]:
        now = [0.0]
        gate = PriorityGate(2, bulk_yield_max_s=1.0, clock=lambda: now[0])
        events: list[str] = []
        gates = [asyncio.Event() for _ in range(3)]

        async def work(name: str, until: asyncio.Event | None = None) -> None:
            events.append(f"start {name}")
            if until is not None:
                await until.wait()
            events.append(f"end {name}")

        first = asyncio.create_task(gate.run(INTERACTIVE, work("interactive-1", gates[0])))
        await asyncio.sleep(0)
        bulk = asyncio.create_task(gate.run(BULK, work("bulk", gates[2])))
        second = asyncio.create_task(gate.run(INTERACTIVE, work("interactive-2", gates[1])))
        await asyncio.sleep(0)  # both interactive calls hold a replica, bulk waits
        now[0] = 0.5
        gates[0].set()  # a replica frees while interactive-2 still runs
        await first
        events.append("bulk yields at 0.5 s")
        now[0] = 1.5
        third = asyncio.create_task(gate.run(INTERACTIVE, work("interactive-3")))
        await third  # frees its replica again: bulk has now waited 1.5 s
        await asyncio.sleep(0)
        events.append("bulk running" if "start bulk" in events else "bulk still waiting")
        gates[1].set()
        gates[2].set()
        await asyncio.gather(second, bulk)
        return events

    events = asyncio.run(asyncio.wait_for(scenario(), 2))
    assert events.index("bulk yields at 0.5 s") < events.index("start bulk")
    assert "bulk running" in events
    assert events.index("start bulk") < events.index("end interactive-2")


def test_bulk_does_not_start_while_an_interactive_batch_is_on_its_way() -> None:
    """Between an interactive batch's start and its engine calls (its lookups) no one waits
    at the gate; a bulk call started then would run beside it."""

    async def scenario() -> list[str]:
        gate = PriorityGate(2, bulk_yield_max_s=60)
        events: list[str] = []

        async def work(name: str) -> None:
            events.append(f"run {name}")

        arrived = gate.coming(INTERACTIVE)
        bulk = asyncio.create_task(gate.run(BULK, work("bulk")))
        await asyncio.sleep(0.05)
        events.append("bulk waited" if not bulk.done() else "bulk ran early")
        await gate.run(INTERACTIVE, work("interactive"))
        arrived()  # handed off: done with the engine
        arrived()  # idempotent
        await bulk
        return events

    assert asyncio.run(asyncio.wait_for(scenario(), 2)) == [
        "bulk waited",
        "run interactive",
        "run bulk",
    ]


def test_held_interactive_work_holds_bulk_back_for_its_yield_at_most() -> None:
    """Work an interactive agent holds for later rounds counts as on its way; a bulk call
    still starts once its yield has run out, though no call ends meanwhile."""

    async def scenario() -> tuple[bool, bool]:
        gate = PriorityGate(2, bulk_yield_max_s=0.2)
        gate.add_backlog(INTERACTIVE, ["held"])
        ran = asyncio.Event()

        async def work() -> None:
            ran.set()

        bulk = asyncio.create_task(gate.run(BULK, work()))
        await asyncio.sleep(0.05)
        early = ran.is_set()
        await asyncio.wait_for(bulk, 1)
        return early, ran.is_set()

    assert asyncio.run(scenario()) == (False, True)
