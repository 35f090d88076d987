"""Run one micro-batch through its steps: retry transient faults, isolate the rest.

Steps resolve the failures they know to be input-caused themselves. What a
step still raises is one of two things, and they are handled apart:

* :class:`TransientError` (Kafka, the dedup table, the engine as a whole): the
  infrastructure is at fault. The batch is retried with bounded exponential
  backoff (tenacity), its partitions paused by the caller meanwhile, nothing
  committed past it. Past ``retry_budget_s`` :class:`RetryBudgetExhausted`
  is raised: the worker exits non-zero and the group moves its partitions to
  a healthy replica. Nothing is lost: the records were never committed.
* anything else: a bug, or input no step anticipated. The request at fault is
  set apart at once (:mod:`pipeline.steps.isolation`) and the rest of the
  batch goes on: one request holds its partitions for one pass of isolation,
  never for a retry budget.

Between attempts of a transient failure, what earlier steps answered without
compute (cancelled, expired, over quota, dead letters) is published at once,
so a cancel reaches a request whose batch keeps retrying.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from pipeline.contract.messages import record_id
from pipeline.kafka.records import Record
from pipeline.settings import LimitSettings
from pipeline.steps.base import (
    NO_CUES,
    AgentCues,
    Batch,
    Item,
    RetryBudgetExhausted,
    TransientError,
)
from pipeline.steps.isolation import (
    QUARANTINED,
    BatchFactory,
    CanaryFactory,
    Chain,
    Isolation,
    describe,
    forget,
    run_steps,
)
from pipeline.steps.publish import Producer
from pipeline.steps.quarantine import QuarantineLookup

log = logging.getLogger(__name__)

# Called before each backoff sleep: (the exception, seconds until the next attempt).
RetryHook = Callable[[BaseException, float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts of a failing batch, and how long to keep trying."""

    initial_s: float
    max_s: float
    budget_s: float


@dataclass
class RunnerHealth:
    """Whether an agent's batches go through, for readiness, ``status`` and metrics.

    ``failing_since`` (``clock()``) is set while a batch keeps failing
    transiently, with the attempt count, the last exception's class and the
    batch's first record; cleared when a batch goes through. ``isolated`` and
    ``quarantined`` count the requests set apart so far.
    """

    failing_since: float | None = None
    attempts: int = 0
    error: str = ""
    first_record: str = ""
    isolated: int = 0
    quarantined: int = 0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def failing_for_s(self) -> float:
        """Seconds the current batch has been failing (0 when batches go through)."""
        return 0.0 if self.failing_since is None else self.clock() - self.failing_since

    def failed(self, exc: BaseException, attempt: int, first: Record) -> None:
        if self.failing_since is None:
            self.failing_since = self.clock()
        self.attempts = attempt
        self.error = type(exc).__name__
        self.first_record = record_id(first.topic, first.partition, first.offset)

    def passed(self) -> None:
        self.failing_since = None
        self.attempts = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "failing_s": round(self.failing_for_s(), 1),
            "attempts": self.attempts,
            "error": self.error,
            "first_record": self.first_record,
        }


class BatchRunner:
    """Runs each micro-batch of one agent through its :class:`Chain`."""

    def __init__(
        self,
        chain: Chain,
        make_batch: BatchFactory,
        policy: RetryPolicy,
        *,
        limits: LimitSettings,
        canary: CanaryFactory,
        quarantine: QuarantineLookup,
        producer: Producer,
        name: str = "batch",
    ) -> None:
        """``limits``: how isolated records are decoded to answer them; ``canary``: a
        known-good request for this agent's steps; ``quarantine``: the records set
        apart so far; ``producer``: where suspect marks go."""
        self.chain = chain
        self._make_batch = make_batch
        self._policy = policy
        self._name = name
        self.health = RunnerHealth()
        self._isolation = Isolation(
            chain,
            make_batch,
            limits=limits,
            canary=canary,
            quarantine=quarantine,
            producer=producer,
            counts=self.health,
            name=name,
        )

    async def run(
        self,
        records: list[Record],
        on_retry: RetryHook | None = None,
        cues: AgentCues = NO_CUES,
    ) -> Batch | None:
        """Return once every record has its outputs published; raises RetryBudgetExhausted.

        Returns the batch as its last attempt ran it when it went through whole,
        None when requests of it were set apart.

        ``on_retry`` runs before each backoff sleep (the caller pauses its
        partitions there); each attempt's batch carries ``cues`` to its steps
        (:class:`~pipeline.steps.base.AgentCues`): the hand-off, once per
        attempt that gets that far, and the start of its last engine call.
        """
        remaining = list(records)

        async def before_sleep(state: RetryCallState) -> None:
            await self._before_sleep(state, remaining[0] if remaining else records[0], on_retry)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransientError),
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
                    batch = await self._attempt(remaining, attempt.retry_state.attempt_number, cues)
                    self.health.passed()
                    await self._isolation.passed()
                    return batch
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise RetryBudgetExhausted(
                f"{self._name}: still failing after {self._policy.budget_s:.0f}s of retries: "
                f"{describe(cause)}"
            ) from cause
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(
        self,
        remaining: list[Record],
        number: int,
        cues: AgentCues,
    ) -> Batch | None:
        """One try at what ``remaining`` still owes; it shrinks as parts are published."""
        owed = len(remaining)
        await self._isolation.try_suspects(remaining)
        if not remaining:
            return None
        batch = self._make_batch(remaining)
        batch.stats.attempts = number
        batch.cues = cues
        try:
            await run_steps(self.chain.steps, batch)
        except TransientError:
            await self._publish_answered(batch, remaining)
            raise
        except Exception as exc:
            await self._isolation.isolate(remaining, exc, first=self.health.failing_since is None)
            return None
        return batch if len(remaining) == owed else None

    async def _publish_answered(self, failed: Batch, remaining: list[Record]) -> None:
        """Publish what a failed attempt answered before any compute; drop it from
        ``remaining``.

        Cancelled, expired, over-quota requests and dead letters were decided
        by steps that do not depend on what failed; publishing them now lets a
        cancel end a request whose batch keeps retrying. Best effort: if this
        fails too (the broker is away), they are decided again next attempt.
        """
        answered = [item for item in failed.items if _decided_without_compute(item)]
        if not answered or len(answered) == len(failed.items):
            return
        done = self._make_batch([item.record for item in answered])
        done.items = answered
        done.count_outcomes()
        try:
            await run_steps(self.chain.publish, done)
        except Exception as exc:
            log.debug("%s: answered requests not published this attempt: %s", self._name, exc)
            return
        forget([item.record for item in answered], remaining)

    async def _before_sleep(
        self, state: RetryCallState, first: Record, on_retry: RetryHook | None
    ) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return
        sleep = state.next_action.sleep if state.next_action else 0.0
        self.health.failed(exc, state.attempt_number, first)
        log.warning(
            "%s: attempt %d failed (%s); retrying in %.1fs, nothing committed",
            self._name,
            state.attempt_number,
            exc,
            sleep,
        )
        if on_retry is not None:
            await on_retry(exc, sleep)


def _decided_without_compute(item: Item) -> bool:
    """Answered by a step that runs before any lookup or the engine."""
    if item.dead_letter is not None:
        return True
    result = item.result
    return result is not None and (
        result.status in ("cancelled", "timeout", "rejected") or result.reason == QUARANTINED
    )
