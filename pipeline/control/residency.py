"""Which model's batches go to the engine next when not every model fits in memory.

A worker serving more models than its budget (``engine.max_loaded_models`` /
``max_loaded_bytes``) loads them in turn. Left to the order batches arrive
in, models with work at once take turns batch by batch, and every turn is a
load (seconds) and an eviction. :class:`ModelResidency` admits each batch of
a model to the engine:

- at once when its model is resident (loaded, or admitted and loading), or
  fits beside the resident ones;
- else once a resident model has gone idle, no batch of it under way for
  ``idle_s``: a model with a backlog has its next batch within milliseconds
  of its last, so its backlog drains before it is swapped out. That model is
  unloaded for the waiting one;
- else once the batch has waited ``max_wait_s``: then the resident model
  quiet the longest makes room, or, when every one is busy, the one resident
  the longest (after its batch under way), so a request's wait for a swap is
  bounded even under saturation, and busy models take turns.

A batch that waits holds its agent, so the model's requests pile up on its
work topic meanwhile: the batch after the load is a full one (a cold model's
waiting requests meet in its first calls). Waiting batches of models that
need a swap are served first come first served.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

Clock = Callable[[], float]


class ResidentModels(Protocol):
    """What the residency asks of the engine."""

    def loaded_models(self) -> list[str]:
        """The ids of the models loaded now."""
        ...

    def fits(self, models: Collection[str]) -> bool:
        """Whether these models fit the memory budget together."""
        ...

    def unload(self, model_id: str) -> bool:
        """Unload the model when no call uses it; whether it was unloaded."""
        ...


@dataclass
class _Waiter:
    """A batch waiting for its model to get a place."""

    since: float
    model_id: str
    future: asyncio.Future[None]
    # it made a busy model give up its place (once): it goes when that batch ends
    displaced: bool = False


@dataclass
class ResidencyStats:
    """Swaps so far: ``idle`` (a resident model had gone idle), ``forced`` (a batch had
    waited ``max_wait_s``)."""

    idle: int = 0
    forced: int = 0


class ModelResidency:
    """Admits batches of the models of one engine to it, one model's backlog at a time
    when they do not fit together (see the module docstring).

    The models that hold a place in memory are the residency's own record
    (seeded with those loaded at the first batch): a model with a place runs its
    batches at once; a model without one waits for a place, which a quiet model
    gives up (idle, or at the wait bound the one that has held its place longest).
    """

    def __init__(
        self,
        engine: ResidentModels,
        *,
        idle_s: float,
        max_wait_s: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self._engine = engine
        self._idle_s = idle_s
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._active: Counter[str] = Counter()
        self._last_batch: dict[str, float] = {}  # when each model's last batch ended
        # the models holding a place, and since when
        self._placed: dict[str, float] | None = None
        self._waiters: list[_Waiter] = []
        self._timer: asyncio.TimerHandle | None = None
        self.stats = ResidencyStats()

    async def admit(self, model_id: str) -> Callable[[], None]:
        """Wait until a batch of ``model_id`` may go to the engine; the returned callable
        ends the batch (idempotent)."""
        placed = self._places()
        if model_id in placed or self._engine.fits([*self._occupied(), model_id]):
            if model_id not in placed:
                self._unload_displaced()
            placed.setdefault(model_id, self._clock())
            self._active[model_id] += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(_Waiter(self._clock(), model_id, future))
            self._dispatch()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._leave(model_id)  # admitted while being cancelled
                raise
        ended = False

        def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self._leave(model_id)

        return end

    @property
    def waiting(self) -> int:
        """Batches waiting for their model to be swapped in."""
        return sum(not w.future.done() for w in self._waiters)

    def _places(self) -> dict[str, float]:
        if self._placed is None:
            # the models loaded at start: idle only once idle_s passes without a batch
            now = self._clock()
            self._placed = {m: now for m in self._engine.loaded_models()}
            self._last_batch.update(self._placed)
        return self._placed

    def _occupied(self) -> list[str]:
        """The models in memory or about to be: the placed ones, and those that gave up
        their place while a batch of theirs is still under way."""
        placed = self._places()
        leaving = [m for m, n in self._active.items() if n and m not in placed]
        return [*placed, *leaving]

    def _unload_displaced(self) -> None:
        """Unload the loaded models that gave up their place and have no batch under way,
        so the engine never picks another victim (its own choice is least recently used)."""
        placed = self._places()
        for model_id in self._engine.loaded_models():
            if model_id not in placed and not self._active[model_id]:
                self._engine.unload(model_id)

    def _leave(self, model_id: str) -> None:
        self._active[model_id] -= 1
        self._last_batch[model_id] = self._clock()
        self._dispatch()

    def _victim(self, waiter: _Waiter, now: float) -> tuple[bool, str | None]:
        """Whether a waiting batch may go now, and the model whose place it takes (None:
        there was room)."""
        model_id, waited_s = waiter.model_id, now - waiter.since
        placed = self._places()
        if model_id in placed or self._engine.fits([*self._occupied(), model_id]):
            return True, None
        forced = waited_s >= self._max_wait_s

        def quiet_since(m: str) -> float:
            return self._last_batch.get(m, float("-inf"))

        # models with no batch under way, the longest quiet first
        for victim in sorted((m for m in placed if not self._active[m]), key=quiet_since):
            idle = now - quiet_since(victim) >= self._idle_s
            others = [m for m in self._occupied() if m != victim]
            if (idle or forced) and self._engine.fits([*others, model_id]):
                if idle:
                    self.stats.idle += 1
                else:
                    self.stats.forced += 1
                return True, victim
        if forced and placed and not waiter.displaced:
            # every placed model is busy: the one placed longest gives up its place now
            # (its next batch waits its turn) and is unloaded once its batch ends
            self.stats.forced += 1
            waiter.displaced = True
            del placed[min(placed, key=lambda m: placed[m])]
        return False, None

    def _dispatch(self) -> None:
        """Admit the waiting batches that may go, in arrival order; come back when the
        next one may (an idle time or a wait running out)."""
        now = self._clock()
        placed = self._places()
        kept: list[_Waiter] = []
        for waiter in self._waiters:
            model_id, future = waiter.model_id, waiter.future
            if future.done():
                continue
            admitted, victim = self._victim(waiter, now)
            if not admitted:
                kept.append(waiter)
                continue
            if victim is not None:
                del placed[victim]
            self._unload_displaced()
            placed.setdefault(model_id, now)
            self._active[model_id] += 1
            future.set_result(None)
        self._waiters = kept
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if any(not w.displaced for w in kept):
            self._timer = asyncio.get_running_loop().call_later(
                self._next_change(now) - now, self._dispatch
            )

    def _next_change(self, now: float) -> float:
        """When a kept waiter may next be admitted without another batch ending."""
        deadline = min(w.since + self._max_wait_s for w in self._waiters if not w.displaced)
        for model_id in self._places():
            if not self._active[model_id] and model_id in self._last_batch:
                deadline = min(deadline, self._last_batch[model_id] + self._idle_s)
        return max(deadline, now + 0.001)
