"""Quarantined records: consumed records that no worker may process again.

A worker quarantines a record that failed a step on its own and left the
steps failing a canary request after it (``pipeline/steps/batch_runner.py``): it
publishes a :class:`~pipeline.contract.messages.QuarantineRecord` to
``translate.quarantine`` (compacted, keyed by ``<topic>:<partition>:<offset>``)
with the record's original bytes. Every worker reads that topic whole into a
:class:`QuarantineRegistry`, and the ``quarantine`` step ends such a record
without running it, so a replacement worker that reads it again (its offset
was not committed before a crash) does not fall into the same trap.

Operators list them (``babelstream dlq quarantine list``) and release them
(``babelstream dlq quarantine release ID``): the original bytes go back to
their topic as a new record, and a tombstone removes the entry.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator

from pipeline.contract.codec import decode_original
from pipeline.contract.messages import QuarantineRecord
from pipeline.contract.pairs import QUARANTINE_TOPIC
from pipeline.control.compacted import apply_compacted
from pipeline.settings import Settings

log = logging.getLogger(__name__)


class QuarantineRegistry:
    """The quarantined records a worker knows, by ``<topic>:<partition>:<offset>``."""

    def __init__(self) -> None:
        self._entries: dict[str, QuarantineRecord] = {}
        # set by the feed once it has read the topic up to where it stood at start
        self.ready = False

    def add(self, entry: QuarantineRecord) -> None:
        self._entries[entry.record_id] = entry

    def release(self, record_id: str) -> None:
        """Forget an entry (a tombstone on the quarantine topic)."""
        self._entries.pop(record_id, None)

    def get(self, record_id: str) -> QuarantineRecord | None:
        return self._entries.get(record_id)

    def entries(self) -> list[QuarantineRecord]:
        """Every entry, oldest first."""
        return sorted(self._entries.values(), key=lambda e: e.quarantined_at)

    def __len__(self) -> int:
        return len(self._entries)


def apply_record(registry: QuarantineRegistry, key: bytes | None, value: bytes | None) -> bool:
    """Feed one quarantine-topic record to ``registry``; False when it was unreadable."""

    def add(raw: bytes) -> None:
        registry.add(QuarantineRecord.from_json(raw))

    return apply_compacted(key, value, add, registry.release, "quarantine")


def quarantined(settings: Settings) -> list[QuarantineRecord]:
    """Every record in quarantine now, oldest first."""
    from pipeline.control.dead_letters import read_to_end

    registry = QuarantineRegistry()
    for record in read_to_end(settings.kafka, QUARANTINE_TOPIC, "quarantine-list"):
        apply_record(registry, record.key, record.value)
    return registry.entries()


def release(settings: Settings, ids: Collection[str]) -> list[QuarantineRecord]:
    """Re-publish the original bytes of the quarantined records ``ids`` to their topics
    and remove them from quarantine; returns the released entries.

    Unknown ids raise ``KeyError`` before anything is published. The record goes
    back as a new record (a new offset), so it is processed as any other.
    """
    from pipeline.client import reliable_producer

    by_id = {entry.record_id: entry for entry in quarantined(settings)}
    unknown = sorted(set(ids) - set(by_id))
    if unknown:
        raise KeyError(", ".join(unknown))
    chosen = [by_id[i] for i in ids]
    producer = reliable_producer(settings.kafka, "quarantine-release")
    timeout_s = settings.kafka.request_timeout_ms / 1000
    try:
        for entry in chosen:
            producer.send(
                entry.source_topic,
                key=decode_original(entry.key, entry.key_encoding),
                value=decode_original(entry.value, entry.value_encoding),
            ).get(timeout=timeout_s)
            producer.send(QUARANTINE_TOPIC, key=entry.record_id.encode(), value=None).get(
                timeout=timeout_s
            )
    finally:
        producer.close(timeout=settings.kafka.producer_close_timeout_s)
    return chosen


def describe(entries: Collection[QuarantineRecord]) -> Iterator[str]:
    """One line per entry, for the CLI."""
    for entry in entries:
        request = f" request {entry.request_id}" if entry.request_id else ""
        yield f"{entry.record_id}{request}: {entry.error} (by {entry.worker or '?'})"
