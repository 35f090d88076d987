"""PriorityGate serves interactive waiters before bulk ones."""

from __future__ import annotations

import asyncio

from pipeline.scheduling import BULK, INTERACTIVE, PriorityGate


async def _run_order() -> list[str]:
    gate = PriorityGate()
    order: list[str] = []

    async def job(name: str, priority: int) -> None:
        async with gate.hold(priority):
            order.append(name)
            await asyncio.sleep(0.01)

    first = asyncio.create_task(job("bulk-running", BULK))
    await asyncio.sleep(0)  # it holds the gate now
    waiting = [
        asyncio.create_task(job("bulk-1", BULK)),
        asyncio.create_task(job("bulk-2", BULK)),
        asyncio.create_task(job("interactive-1", INTERACTIVE)),
        asyncio.create_task(job("interactive-2", INTERACTIVE)),
    ]
    await asyncio.gather(first, *waiting)
    return order


def test_interactive_jumps_the_queue_but_running_work_finishes() -> None:
    assert asyncio.run(_run_order()) == [
        "bulk-running", "interactive-1", "interactive-2", "bulk-1", "bulk-2",
    ]


def test_cancelled_waiter_does_not_block_the_gate() -> None:
    async def scenario() -> bool:
        gate = PriorityGate()
        async with gate.hold(BULK):
            waiter = asyncio.create_task(gate.hold(INTERACTIVE).__aenter__())
            await asyncio.sleep(0)
            waiter.cancel()
        async with gate.hold(BULK):
            return True

    assert asyncio.run(asyncio.wait_for(scenario(), 2))
