"""Model residency under a budget: a backlog drains before its model is swapped out, an
idle model makes room, and a waiting batch's wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from pipeline.control.residency import ModelResidency


class Engine:
    """A budget of ``slots`` models; loads when a batch of a model runs, like the engine."""

    def __init__(self, slots: int, loaded: list[str]) -> None:
        self.slots = slots
        self.loaded = list(loaded)
        self.unloaded: list[str] = []
        self.loads: list[str] = []

    def loaded_models(self) -> list[str]:
        return list(self.loaded)

    def fits(self, models: Collection[str]) -> bool:
        return len(set(models)) <= self.slots

    def unload(self, model_id: str) -> bool:
        self.loaded.remove(model_id)
        self.unloaded.append(model_id)
        return True

    def use(self, model_id: str) -> None:
        if model_id not in self.loaded:
            self.loads.append(model_id)
            self.loaded.append(model_id)


async def batch(residency: ModelResidency, engine: Engine, model: str, seconds: float) -> str:
    end = await residency.admit(model)
    try:
        engine.use(model)
        await asyncio.sleep(seconds)
        return model
    finally:
        end()


def test_a_model_with_a_backlog_keeps_its_place_until_it_drains() -> None:
    async def scenario() -> tuple[list[str], Engine]:
        engine = Engine(1, ["a"])
        residency = ModelResidency(engine, idle_s=0.5, max_wait_s=30.0)
        done: list[str] = []

        async def backlog(model: str, batches: int) -> None:
            for _ in range(batches):
                done.append(await batch(residency, engine, model, 0.01))
                await asyncio.sleep(0.001)  # the agent fetches its next batch

        cold = asyncio.create_task(backlog("b", 3))
        await backlog("a", 5)
        await cold
        return done, engine

    done, engine = asyncio.run(scenario())
    assert done == ["a"] * 5 + ["b"] * 3  # b waited for a's backlog, then ran its own
    assert engine.loads == ["b"] and engine.unloaded == ["a"]


def test_a_wait_for_a_swap_is_bounded_while_the_resident_model_stays_busy() -> None:
    async def scenario() -> tuple[float, ModelResidency, Engine]:
        engine = Engine(1, ["a"])
        residency = ModelResidency(engine, idle_s=1.0, max_wait_s=0.1)
        loop = asyncio.get_running_loop()
        stop = False

        async def busy() -> None:
            while not stop:
                await batch(residency, engine, "a", 0.01)
                await asyncio.sleep(0.001)

        runner = asyncio.create_task(busy())
        await asyncio.sleep(0.005)  # a is busy now
        began = loop.time()
        await batch(residency, engine, "b", 0.0)
        waited = loop.time() - began
        stop = True
        await runner
        return waited, residency, engine

    waited, residency, engine = asyncio.run(scenario())
    # a never went idle: b went in at the bound, while a still had batches coming
    assert waited >= 0.1, waited
    assert residency.stats.forced >= 1 and residency.stats.idle == 0 and "b" in engine.loads


def test_models_that_fit_together_never_wait() -> None:
    async def scenario() -> Engine:
        engine = Engine(2, [])
        residency = ModelResidency(engine, idle_s=10.0, max_wait_s=10.0)
        await asyncio.wait_for(
            asyncio.gather(*(batch(residency, engine, m, 0.01) for m in "abab")), 1.0
        )
        assert residency.waiting == 0
        return engine

    engine = asyncio.run(scenario())
    assert sorted(engine.loads) == ["a", "b"] and not engine.unloaded


def test_an_idle_model_makes_room_at_once_and_waiters_go_in_arrival_order() -> None:
    async def scenario() -> tuple[list[str], Engine]:
        engine = Engine(1, ["a"])
        residency = ModelResidency(engine, idle_s=0.0, max_wait_s=10.0)
        order: list[str] = []

        async def one(model: str) -> None:
            order.append(await batch(residency, engine, model, 0.01))

        await asyncio.wait_for(asyncio.gather(one("b"), one("c"), one("d")), 2.0)
        return order, engine

    order, engine = asyncio.run(scenario())
    assert order == ["b", "c", "d"] and engine.loads == ["b", "c", "d"]
    assert engine.unloaded == ["a", "b", "c"]


def test_a_cancelled_waiter_leaves_no_trace() -> None:
    async def scenario() -> ModelResidency:
        engine = Engine(1, ["a"])
        residency = ModelResidency(engine, idle_s=10.0, max_wait_s=10.0)
        holder = asyncio.create_task(batch(residency, engine, "a", 0.05))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(residency.admit("b"))
        await asyncio.sleep(0.01)
        assert residency.waiting == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await holder
        assert residency.waiting == 0
        return residency

    residency = asyncio.run(scenario())
    assert residency.stats.forced == residency.stats.idle == 0
