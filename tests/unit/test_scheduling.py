"""PriorityGate: interactive before bulk, one engine call at a time, even under cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

from pipeline.scheduling import BULK, INTERACTIVE, PriorityGate


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
    overlaps: list[str] = []

    def engine_call(name: str) -> str:
        if not running.acquire(blocking=False):
            overlaps.append(name)
            return name
        try:
            time.sleep(0.2)
            return name
        finally:
            running.release()

    async def scenario() -> str:
        gate = PriorityGate()
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(
            gate.run(INTERACTIVE, loop.run_in_executor(None, engine_call, "first"))
        )
        await asyncio.sleep(0.05)  # the first call is inside the engine now
        first.cancel()
        return await gate.run(INTERACTIVE, _in_executor(engine_call, "second"))

    async def _in_executor(fn: object, name: str) -> str:
        return await asyncio.get_running_loop().run_in_executor(None, engine_call, name)

    assert asyncio.run(asyncio.wait_for(scenario(), 5)) == "second"
    assert overlaps == []
