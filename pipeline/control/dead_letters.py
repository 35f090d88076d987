"""Dead letters: listing them, and replaying their original bytes once the cause is fixed.

A dead letter's id is where the refused record came from,
``<source topic>:<partition>:<offset>`` (a router that dead-letters the same
record twice produces the same id). Replaying re-publishes the original key
and value (kept in the letter, base64 when not UTF-8) to
``translate.requests``, each letter at most once: every replayed record and
its :class:`~pipeline.contract.messages.ReplayMarker` (``translate.dlq.replayed``,
compacted, keyed by id) are written in one Kafka transaction, and replayers
share one transactional id, so a second replayer fences the first and only
then reads the markers (read committed): no letter is replayed twice.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from pydantic import ValidationError

from pipeline.contract.codec import DeadLettered, RecordRef, decode_original, decode_request
from pipeline.contract.messages import DeadLetter, ReplayMarker, now_ms, record_id
from pipeline.contract.pairs import (
    DLQ_REPLAYED_TOPIC,
    DLQ_TOPIC,
    REPLAY_TRANSACTION_SUFFIX,
    REQUESTS_TOPIC,
)
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import KafkaSettings, LimitSettings


def dead_letter_id(letter: DeadLetter) -> str:
    """``<source topic>:<partition>:<offset>`` of the record that was refused."""
    return record_id(letter.source_topic, letter.partition, letter.offset)


@dataclass(frozen=True, slots=True)
class StoredLetter:
    """A dead letter as read from the DLQ."""

    letter: DeadLetter

    @property
    def id(self) -> str:
        return dead_letter_id(self.letter)


@dataclass(frozen=True)
class LetterFilter:
    """Which dead letters to list or replay (every given condition must hold)."""

    reasons: Collection[str] = ()
    since_ms: int | None = None
    ids: Collection[str] = ()

    def __call__(self, letter: DeadLetter) -> bool:
        return (
            (not self.reasons or letter.reason in self.reasons)
            and (self.since_ms is None or letter.received_at >= self.since_ms)
            and (not self.ids or dead_letter_id(letter) in self.ids)
        )


def read_to_end(
    kafka: KafkaSettings,
    topic: str,
    role: str,
    since_ms: int | None = None,
) -> Iterator[Any]:
    """Every committed record of ``topic`` from ``since_ms`` (or the start) to its end now."""
    consumer = KafkaConsumer(
        **kafka_python_options(kafka, role),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        starts = (
            consumer.offsets_for_times({tp: since_ms for tp in tps}) if since_ms is not None else {}
        )
        for tp in tps:
            found = starts.get(tp)
            if found is not None:
                consumer.seek(tp, found.offset)
            elif since_ms is not None:
                consumer.seek(tp, ends[tp])  # nothing that recent
            else:
                consumer.seek_to_beginning(tp)
        remaining = {tp for tp in tps if consumer.position(tp) < ends[tp]}
        while remaining:
            for tp, records in consumer.poll(timeout_ms=500).items():
                yield from (r for r in records if r.offset < ends[tp])
            remaining = {tp for tp in remaining if consumer.position(tp) < ends[tp]}
    finally:
        consumer.close()


def read_dead_letters(
    kafka: KafkaSettings, which: LetterFilter = LetterFilter()
) -> list[StoredLetter]:
    """The DLQ's letters that pass ``which``, oldest first per partition."""
    letters = []
    for record in read_to_end(kafka, DLQ_TOPIC, "dlq", which.since_ms):
        try:
            letter = DeadLetter.from_json(record.value)
        except (ValidationError, TypeError):
            continue  # not ours to judge: the DLQ only ever gets DeadLetter records
        if which(letter):
            letters.append(StoredLetter(letter))
    return letters


def read_replayed(kafka: KafkaSettings) -> dict[str, ReplayMarker]:
    """Replay markers by dead-letter id (committed transactions only)."""
    markers: dict[str, ReplayMarker] = {}
    for record in read_to_end(kafka, DLQ_REPLAYED_TOPIC, "dlq-markers"):
        key = (record.key or b"").decode("utf-8", errors="replace")
        if record.value is None:
            markers.pop(key, None)
            continue
        markers[key] = ReplayMarker.from_json(record.value)
    return markers


@dataclass(frozen=True, slots=True)
class Replay:
    """One record to re-publish for one dead letter."""

    letter_id: str
    key: bytes | None
    value: bytes
    rewritten: bool


@dataclass
class ReplayPlan:
    """What a replay will do with each chosen letter."""

    replays: list[Replay] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    # letter id -> why it is not replayed (it would be dead-lettered again)
    refused: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "replayed": len(self.replays),
            "rewritten": sum(r.rewritten for r in self.replays),
            "already_replayed": len(self.already),
            "refused": len(self.refused),
            "refused_ids": self.refused,
        }


def _fix(value: bytes, limits: LimitSettings, *, fix_limits: bool, restamp: int | None) -> bytes:
    """The request with what can be fixed without changing its translation, fixed."""
    document = json.loads(value)
    if fix_limits and isinstance(document.get("timeout_ms"), int):
        document["timeout_ms"] = min(
            max(document["timeout_ms"], limits.min_timeout_ms), limits.max_timeout_ms
        )
    if restamp is not None:
        document["submitted_at"] = restamp
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def plan_replay(
    letters: Iterable[StoredLetter],
    replayed: Mapping[str, ReplayMarker],
    limits: LimitSettings,
    *,
    fix_limits: bool = False,
    restamp_at: int | None = None,
) -> ReplayPlan:
    """Decide each letter: replay (original bytes, or fixed), already replayed, or refused.

    A letter whose request would be refused again under ``limits`` is not
    replayed. ``fix_limits`` clamps ``timeout_ms`` into the allowed range
    (texts and metadata over their limits cannot be fixed without changing
    the request); ``restamp_at`` sets ``submitted_at``, so the deadline runs
    from the replay instead of the original submission.
    """
    plan = ReplayPlan()
    seen: set[str] = set()
    for stored in letters:
        letter_id = stored.id
        if letter_id in seen:
            continue  # the same record dead-lettered twice (at-least-once router)
        seen.add(letter_id)
        if letter_id in replayed:
            plan.already.append(letter_id)
            continue
        letter = stored.letter
        key = decode_original(letter.key, letter.key_encoding)
        value = decode_original(letter.value, letter.value_encoding)
        if value is None:
            plan.refused[letter_id] = "the dead letter kept no value"
            continue
        rewrite = (fix_limits and letter.reason == "limit_exceeded") or restamp_at is not None
        if rewrite:
            try:
                value = _fix(value, limits, fix_limits=fix_limits, restamp=restamp_at)
            except (ValueError, AttributeError):
                plan.refused[letter_id] = "not a JSON object: cannot be rewritten"
                continue
        ref = RecordRef(letter.source_topic, letter.partition, letter.offset)
        decoded = decode_request(key, value, ref, limits)
        if isinstance(decoded, DeadLettered):
            plan.refused[letter_id] = (
                f"would be dead-lettered again ({decoded.reason}): {decoded.dead_letter.error}"
            )
            continue
        plan.replays.append(Replay(letter_id, key, value, rewrite))
    return plan


def transactional_id(kafka: KafkaSettings) -> str:
    """Shared by every replayer, so a new one fences any still running."""
    return f"{kafka.client_id}{REPLAY_TRANSACTION_SUFFIX}"


class Replayer:
    """Publishes replays and their markers in one transaction (see the module docstring)."""

    def __init__(self, kafka: KafkaSettings) -> None:
        from kafka import KafkaProducer

        self._kafka = kafka
        self._producer = KafkaProducer(
            **kafka_python_options(kafka, "dlq-replay"),
            transactional_id=transactional_id(kafka),
            acks="all",
            enable_idempotence=True,
        )
        # Fences an earlier replayer and aborts its open transaction: markers read
        # after this see every replay that will ever commit before ours.
        self._producer.init_transactions()

    def replayed(self) -> dict[str, ReplayMarker]:
        return read_replayed(self._kafka)

    def publish(self, replays: Iterable[Replay]) -> int:
        """Re-publish ``replays`` and their markers atomically; returns the count."""
        replays = list(replays)
        if not replays:
            return 0
        self._producer.begin_transaction()
        try:
            stamp = now_ms()
            for replay in replays:
                self._producer.send(REQUESTS_TOPIC, key=replay.key, value=replay.value)
                marker = ReplayMarker(
                    dead_letter_id=replay.letter_id,
                    replayed_at=stamp,
                    topic=REQUESTS_TOPIC,
                    rewritten=replay.rewritten,
                )
                self._producer.send(
                    DLQ_REPLAYED_TOPIC, key=replay.letter_id.encode(), value=marker.to_json()
                )
            self._producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(KafkaError):  # fenced or broken: nothing was committed
                self._producer.abort_transaction()
            raise
        return len(replays)

    def close(self) -> None:
        self._producer.close(timeout=self._kafka.producer_close_timeout_s)

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
