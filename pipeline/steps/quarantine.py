"""quarantine: a record set apart for breaking the steps ends without running them."""

from __future__ import annotations

from typing import ClassVar, Protocol

from pipeline.contract.codec import Accepted, RecordRef, dead_letter, decode_request
from pipeline.contract.messages import QuarantineRecord, record_id
from pipeline.contract.pairs import QUARANTINE_TOPIC
from pipeline.settings import LimitSettings
from pipeline.steps.base import Batch, Fields, wait_until_read


class QuarantineLookup(Protocol):
    """The quarantined records a worker knows
    (:class:`pipeline.control.quarantine.QuarantineRegistry`)."""

    @property
    def ready(self) -> bool:
        """Whether the quarantine topic has been read up to where it stood at start."""
        ...

    def get(self, record_id: str) -> QuarantineRecord | None: ...


class Quarantine:
    """Ends every pending record that is in quarantine, without running later steps on it.

    Reads: the record's topic, partition and offset (and its request, decoded
    here when no earlier step did). Resolves: an ``error`` result with reason
    ``quarantined`` for a decodable request, else a dead letter. Waits (up to
    ``ready_wait_s``) until the worker has read the quarantine topic up to
    where it stood at start. Raises: :class:`TransientError` when it is still
    not read by then (the runner retries).
    """

    reads: ClassVar[Fields] = frozenset({"record"})
    sets: ClassVar[Fields] = frozenset({"dead_letter", "result"})

    def __init__(
        self, registry: QuarantineLookup, limits: LimitSettings, ready_wait_s: float
    ) -> None:
        self._registry = registry
        self._limits = limits
        self._ready_wait_s = ready_wait_s

    async def __call__(self, batch: Batch) -> None:
        await wait_until_read(self._registry, self._ready_wait_s, QUARANTINE_TOPIC)
        for item in batch.pending():
            record = item.record
            entry = self._registry.get(record_id(record.topic, record.partition, record.offset))
            if entry is None or entry.state != "quarantined":
                continue  # a suspect is the runner's to try (pipeline/steps/isolation.py)
            why = f"quarantined: it failed on its own with {entry.error}"
            ref = RecordRef(record.topic, record.partition, record.offset)
            if item.request is None:
                decoded = decode_request(record.key, record.value, ref, self._limits)
                if isinstance(decoded, Accepted):
                    item.request = decoded.request
            if item.request is None:
                item.dead_letter = dead_letter(ref, record.key, record.value, "quarantined", why)
            else:
                batch.resolve(item, "error", reason="quarantined", error=why)
