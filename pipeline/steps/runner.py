"""Run one micro-batch through its steps; retry the whole batch when a step fails.

Steps resolve input-caused failures themselves, so anything a step raises is
not the request's fault: a :class:`TransientError` (Kafka, the dedup table,
the engine as a whole) or a bug. Either way the batch is retried from the
start with bounded exponential backoff (tenacity), its partitions paused by
the caller meanwhile, and nothing is committed past it. Past the retry budget
:class:`RetryBudgetExhausted` is raised: the worker must exit non-zero so its
partitions move to a healthy replica. Nothing is lost: the records were never
committed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from pipeline.steps.base import Batch, Record, RetryBudgetExhausted, Step, TransientError
from pipeline.steps.trace import abandon_spans

log = logging.getLogger(__name__)

BatchFactory = Callable[[list[Record]], Batch]
# Called before each backoff sleep: (the exception, seconds until the next attempt).
RetryHook = Callable[[BaseException, float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts of a failing batch, and how long to keep trying."""

    initial_s: float
    max_s: float
    budget_s: float


class BatchRunner:
    """Composes the steps of one agent and runs each micro-batch through them in order."""

    def __init__(
        self,
        steps: Sequence[Step],
        make_batch: BatchFactory,
        policy: RetryPolicy,
        *,
        name: str = "batch",
    ) -> None:
        self.steps = tuple(steps)
        self._make_batch = make_batch
        self._policy = policy
        self._name = name

    async def run(
        self,
        records: list[Record],
        on_retry: RetryHook | None = None,
        on_hand_off: Callable[[], None] | None = None,
        on_last_call: Callable[[], None] | None = None,
    ) -> Batch:
        """The finished batch (everything published); raises RetryBudgetExhausted.

        ``on_retry`` runs before each backoff sleep (the caller pauses its
        partitions there); ``on_hand_off`` when an attempt is done with the
        engine (:class:`~pipeline.steps.handoff.HandOff`), once per attempt
        that gets that far; ``on_last_call`` when an attempt's last planned
        engine call gets the engine (:attr:`Batch.last_call_started`).
        """

        async def before_sleep(state: RetryCallState) -> None:
            await self._before_sleep(state, on_retry)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential_jitter(
                multiplier=self._policy.initial_s,
                max=self._policy.max_s,
                jitter=self._policy.initial_s,
            ),
            stop=stop_after_delay(self._policy.budget_s),
            before_sleep=before_sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    batch = self._make_batch(records)
                    batch.stats.attempts = attempt.retry_state.attempt_number
                    if on_hand_off is not None:
                        batch.hand_off = on_hand_off
                    if on_last_call is not None:
                        batch.last_call_started = on_last_call
                    await self._through_steps(batch)
                    return batch
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise RetryBudgetExhausted(
                f"{self._name}: still failing after {self._policy.budget_s:.0f}s of retries: "
                f"{_describe(cause)}"
            ) from cause
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _through_steps(self, batch: Batch) -> None:
        try:
            for step in self.steps:
                await step(batch)
        except Exception as exc:
            abandon_spans(batch, _describe(exc))
            raise

    async def _before_sleep(self, state: RetryCallState, on_retry: RetryHook | None) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return
        sleep = state.next_action.sleep if state.next_action else 0.0
        if isinstance(exc, TransientError):
            log.warning(
                "%s: attempt %d failed (%s); retrying in %.1fs, nothing committed",
                self._name,
                state.attempt_number,
                exc,
                sleep,
            )
        else:  # not a known infrastructure fault: a bug deserves its traceback
            log.error(
                "%s: attempt %d failed unexpectedly; retrying in %.1fs",
                self._name,
                state.attempt_number,
                sleep,
                exc_info=exc,
            )
        if on_retry is not None:
            await on_retry(exc, sleep)


def _describe(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown failure"
