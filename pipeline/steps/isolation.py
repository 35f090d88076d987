"""Isolation: find the request that makes a step fail, end it, and let the rest go on.

A step raised something no step classifies (not a :class:`TransientError`):
a bug, or input no step anticipated. It must not stop the pair. The batch is
*isolated*:

1. A canary request (a known-good text of the agent's) runs the same steps
   first (:attr:`Chain.canary_steps`: nothing published, no cache, so it
   reaches the engine). If it fails, the steps are broken for every request:
   the fault is transient after all. If this agent's batches went through
   until this one, the batch may have broken them: its records are marked
   *suspect* in ``translate.quarantine``, and the batch is retried.
2. The batch is split in halves, each run through the steps on its own (and
   published), until every failing request stands alone.
3. The canary runs again. If it passes, each lone failure ends as one
   ``error`` result (reason ``internal_error``, the exception's class in its
   text) and a dead letter holding its traceback. If it fails, the lone
   failure broke the steps for what follows: it ends as ``quarantined`` and is
   recorded so in ``translate.quarantine``.

A worker that meets a *suspect* record (its predecessor marked it and did not
get to clear it, typically because it exited) runs it alone between two
canaries before anything else of its batch: a record after which the canary
fails is quarantined, one that passes is cleared. So a record that breaks
the steps costs each replacement worker one try at most, never a crash loop.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from pipeline.contract.codec import Accepted, RecordRef, dead_letter, decode_request, encode_bytes
from pipeline.contract.messages import (
    DeadLetterReason,
    QuarantineRecord,
    TranslationRequest,
    now_ms,
    record_id,
)
from pipeline.contract.pairs import QUARANTINE_TOPIC, Pair
from pipeline.kafka.records import Outgoing, Record
from pipeline.observability import metrics
from pipeline.settings import LimitSettings
from pipeline.steps.base import (
    GIVEN,
    Batch,
    Step,
    TransientError,
    check_order,
    runs_in_canary,
)
from pipeline.steps.publish import Producer
from pipeline.steps.quarantine import QuarantineLookup
from pipeline.steps.trace import abandon_spans

log = logging.getLogger(__name__)

BatchFactory = Callable[[list[Record]], Batch]
# A known-good request of this agent's, as a record no consumer ever saw.
CanaryFactory = Callable[[], Record]
# where a canary record claims to come from: no consumed record has these
CANARY_PARTITION = CANARY_OFFSET = -1
# The dead letter keeps at most this much of a traceback (the DLQ is a Kafka topic).
MAX_TRACEBACK_CHARS = 8_000
INTERNAL_ERROR: DeadLetterReason = "internal_error"
QUARANTINED: DeadLetterReason = "quarantined"


class Chain:
    """An agent's steps: those that decide each request's outcome, then those that
    publish the batch (emit → publish → replies → spans → metrics).

    Isolation ends a request through ``publish`` alone, and runs a canary
    through the steps whose ``in_canary`` is not False.
    """

    def __init__(self, decide: Sequence[Step], publish: Sequence[Step]) -> None:
        """Raises ChainOrderError for a step before the steps that set what it reads."""
        self.decide = tuple(decide)
        self.publish = tuple(publish)
        self.steps = (*self.decide, *self.publish)
        self.canary_steps = tuple(step for step in self.steps if runs_in_canary(step))
        check_order(self.steps)
        check_order(self.canary_steps)
        # isolation ends a request through publish alone: its result or dead letter set,
        # and the span its failed attempt opened
        check_order(self.publish, GIVEN | {"result", "dead_letter", "span"})


class IsolationCounts(Protocol):
    """Where isolation counts the requests it set apart (the runner's health)."""

    isolated: int
    quarantined: int


async def run_steps(steps: Sequence[Step], batch: Batch) -> None:
    """``batch`` through ``steps``; a failure leaves its spans marked, then propagates."""
    try:
        for step in steps:
            await step(batch)
    except Exception as exc:
        abandon_spans(batch, describe(exc))
        raise


class Isolation:
    """Sets apart the requests that make an agent's steps fail (see the module)."""

    def __init__(
        self,
        chain: Chain,
        make_batch: BatchFactory,
        *,
        limits: LimitSettings,
        canary: CanaryFactory,
        quarantine: QuarantineLookup,
        producer: Producer,
        counts: IsolationCounts,
        name: str,
    ) -> None:
        self._chain = chain
        self._make_batch = make_batch
        self._limits = limits
        self._canary = canary
        self._quarantine = quarantine
        self._producer = producer
        self._counts = counts
        self._name = name
        # suspect marks this agent wrote, cleared once its batches go through again
        self._marked: list[str] = []

    async def isolate(self, remaining: list[Record], failure: Exception, first: bool) -> None:
        """End the requests of ``remaining`` that fail on their own, publish the rest.

        ``first``: the agent's batches went through until this one. Raises
        TransientError when a canary fails first. ``remaining`` shrinks as
        parts are published, so a retry runs only what is left.
        """
        log.warning(
            "%s: a batch of %d failed with %s; isolating the request(s) at fault",
            self._name,
            len(remaining),
            describe(failure),
        )
        if not await self._canary_passes():
            if first:
                await self._mark_suspect(remaining)
            raise TransientError(
                f"{describe(failure)}, and a canary request failed too"
            ) from failure
        suspects: list[tuple[Record, BaseException]] = []
        await self._narrow(list(remaining), failure, suspects, remaining)
        if suspects:
            broke = not await self._canary_passes()
            await self._end(suspects, QUARANTINED if broke else INTERNAL_ERROR)
            forget([record for record, _ in suspects], remaining)

    async def try_suspects(self, remaining: list[Record]) -> None:
        """Run each suspect record of ``remaining`` alone between canaries; end or clear it.

        Raises TransientError when the canary fails before a suspect (the steps
        are broken already: nothing can be told about it).
        """
        for record in [r for r in remaining if self._suspect(r)]:
            if not await self._canary_passes():
                raise TransientError("a canary request failed before a suspect record")
            failure: BaseException | None = None
            try:
                await run_steps(self._chain.steps, self._make_batch([record]))
            except TransientError:
                raise
            except Exception as exc:
                failure = exc
            broke = not await self._canary_passes()
            if broke:
                await self._end([(record, failure or _BrokeTheSteps())], QUARANTINED)
            elif failure is not None:
                await self._end([(record, failure)], INTERNAL_ERROR)
            else:
                await self._clear([_record_id(record)])
            forget([record], remaining)

    async def passed(self) -> None:
        """The agent's batches go through again: clear the suspect marks it wrote."""
        if self._marked:
            marked, self._marked = self._marked, []
            try:
                await self._clear(marked)
            except Exception as exc:  # the next worker tries them alone, then clears them
                log.warning("%s: suspect marks not cleared: %s", self._name, exc)

    def _suspect(self, record: Record) -> bool:
        entry = self._quarantine.get(_record_id(record))
        return entry is not None and entry.state == "suspect"

    async def _narrow(
        self,
        records: list[Record],
        failure: BaseException,
        suspects: list[tuple[Record, BaseException]],
        remaining: list[Record],
    ) -> None:
        """Split ``records`` (which failed with ``failure``) until each failure stands
        alone; what goes through is published and leaves ``remaining``."""
        if len(records) == 1:
            suspects.append((records[0], failure))
            return
        mid = len(records) // 2
        for part in (records[:mid], records[mid:]):
            try:
                await run_steps(self._chain.steps, self._make_batch(part))
            except TransientError:
                raise
            except Exception as exc:
                await self._narrow(part, exc, suspects, remaining)
            else:
                forget(part, remaining)

    async def _canary_passes(self) -> bool:
        batch = self._make_batch([self._canary()])
        try:
            await run_steps(self._chain.canary_steps, batch)
        except Exception as exc:
            log.warning("%s: the canary request failed: %s", self._name, describe(exc))
            return False
        (item,) = batch.items
        # a translation agent answers it ok; the router sends it on (an answer for a
        # pair no model serves is a decision too); a dead letter is a failure
        answered = item.result is not None and item.result.status == "ok"
        sent_on = item.result is None and bool(batch.outgoing)
        passed = item.dead_letter is None and (answered or sent_on)
        if not passed:
            outcome = item.result.status if item.result else "no result"
            log.warning("%s: the canary request came back %s", self._name, outcome)
        return passed

    async def _end(
        self, suspects: list[tuple[Record, BaseException]], reason: DeadLetterReason
    ) -> None:
        """One ``error`` result (when the record decodes) and one dead letter per suspect;
        a quarantine entry too when ``reason`` is ``quarantined``."""
        batch = self._make_batch([record for record, _ in suspects])
        for item, (record, exc) in zip(batch.items, suspects, strict=True):
            ref = RecordRef(record.topic, record.partition, record.offset)
            trace = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
            item.dead_letter = dead_letter(ref, record.key, record.value, reason, trace)
            request = _decode(record, ref, self._limits)
            if request is not None:
                item.request = request
                batch.resolve(
                    item,
                    "error",
                    reason=reason,
                    error=f"internal error ({type(exc).__name__}); the request was set apart "
                    "and the rest of its batch served (details in the dead-letter topic)",
                    model=batch.model_id or None,
                )
            if reason == QUARANTINED:
                batch.outgoing.append(
                    _entry(record, "quarantined", describe(exc), batch.worker, request)
                )
            log.error(
                "%s: %s (offset %d of partition %d) failed on its own with %s; ended as %s, "
                "its traceback is in the dead-letter topic",
                self._name,
                "an undecodable record" if request is None else f"request {request.request_id}",
                record.offset,
                record.partition,
                describe(exc),
                reason,
            )
        batch.count_outcomes()
        await run_steps(self._chain.publish, batch)
        self._counts.isolated += len(suspects)
        if reason == QUARANTINED:
            self._counts.quarantined += len(suspects)
        metrics.record_isolated(self._name, reason, len(suspects))

    async def _mark_suspect(self, records: Sequence[Record]) -> None:
        """Record ``records`` as suspects (best effort: the broker may be the fault)."""
        entries = [
            _entry(r, "suspect", "the steps failed during its batch", "", None) for r in records
        ]
        try:
            await self._producer.send_all(entries)
        except Exception as exc:
            log.warning("%s: suspect records not marked: %s", self._name, exc)
            return
        self._marked += [e.key.decode() for e in entries if e.key is not None]
        log.warning(
            "%s: the steps failed for a canary after this batch; its %d records are "
            "marked suspect: a worker that reads them again tries each alone",
            self._name,
            len(entries),
        )

    async def _clear(self, ids: Sequence[str]) -> None:
        await self._producer.send_all(
            [Outgoing(QUARANTINE_TOPIC, i.encode(), None, [], kind="cleared") for i in ids]
        )


class _BrokeTheSteps(Exception):
    """A record that went through, after which the canary failed."""

    def __init__(self) -> None:
        super().__init__("it went through, and the steps failed a canary request after it")


def forget(done: Sequence[Record], remaining: list[Record]) -> None:
    """Drop the records of ``done`` (by identity) from ``remaining``, in place."""
    gone = {id(record) for record in done}
    remaining[:] = [record for record in remaining if id(record) not in gone]


def canary_record(topic: str, pair: Pair, text: str) -> Record:
    """A known-good request of ``pair`` as if consumed from ``topic`` (no offset of its own).

    Its domain is its own (digests include the domain), so no translation kept
    from an earlier canary answers it: it reaches the engine every time.
    """
    marker = uuid.uuid4().hex
    request = TranslationRequest(
        request_id=f"canary-{marker}",
        source_lang=pair.source,
        target_lang=pair.target,
        text=text,
        domain=f"canary-{marker[:16]}",
        submitted_at=now_ms(),
    )
    return Record(topic, CANARY_PARTITION, CANARY_OFFSET, None, request.to_json())


def describe(exc: BaseException | None) -> str:
    """``Class: message`` of an exception, on one line."""
    return f"{type(exc).__name__}: {exc}" if exc is not None else "unknown failure"


def _record_id(record: Record) -> str:
    return record_id(record.topic, record.partition, record.offset)


def _decode(record: Record, ref: RecordRef, limits: LimitSettings) -> TranslationRequest | None:
    try:
        decoded = decode_request(record.key, record.value, ref, limits)
    except Exception:  # the decoder itself failed on it: a dead letter is all it gets
        return None
    return decoded.request if isinstance(decoded, Accepted) else None


def _entry(
    record: Record,
    state: str,
    error: str,
    worker: str,
    request: TranslationRequest | None,
) -> Outgoing:
    key, key_encoding = encode_bytes(record.key)
    value, value_encoding = encode_bytes(record.value)
    entry = QuarantineRecord(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        state="suspect" if state == "suspect" else "quarantined",
        request_id=request.request_id if request is not None else None,
        error=error[:1000],
        quarantined_at=now_ms(),
        worker=worker or None,
        key=key,
        key_encoding=key_encoding,
        value=value,
        value_encoding=value_encoding,
    )
    return Outgoing(QUARANTINE_TOPIC, entry.record_id.encode(), entry.to_json(), [], kind=state)
