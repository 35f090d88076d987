"""Cancellation: publishing cancels, and the set of cancels a worker knows.

A cancel is a :class:`~pipeline.contract.messages.CancelRequest` on ``translate.cancel``
(compacted, keyed by request id or ``job:<job id>``; a tenant's own cancel, which
covers that tenant's requests only, under ``tenant:<tenant>:`` before it). Every worker reads the
whole topic into a :class:`CancelRegistry`; a request it covers that has not
reached the engine yet ends as ``status: cancelled`` without compute.

Memory stays bounded: a cancel can only cover requests submitted before it,
and every request's deadline is at most ``limits.max_timeout_ms`` after its
submission, so a cancel older than that covers nothing still alive and is
forgotten (the topic's retention is the same horizon).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from cachetools import TLRUCache

from pipeline.contract.messages import (
    TENANT_CANCEL,
    CancelRequest,
    TranslationRequest,
    job_cancel_key,
    now_ms,
    tenant_label,
)
from pipeline.contract.pairs import CANCEL_TOPIC
from pipeline.control.compacted import apply_compacted
from pipeline.settings import Settings

log = logging.getLogger(__name__)

# what a cancel covers: a request id or a job id, of one tenant's requests (or of any: None)
Target = tuple[Literal["request", "job"], str, str | None]


def _target(cancel: CancelRequest) -> Target:
    if cancel.request_id is not None:
        return ("request", cancel.request_id, cancel.tenant)
    return ("job", cancel.job_id or "", cancel.tenant)


def _target_of_key(key: str) -> Target:
    """The target a record key names (``[tenant:<t>:][job:]<id>``)."""
    tenant = None
    if key.startswith(TENANT_CANCEL):
        tenant, _, key = key.removeprefix(TENANT_CANCEL).partition(":")
    if key.startswith(job_cancel_key("")):
        return ("job", key.removeprefix(job_cancel_key("")), tenant)
    return ("request", key, tenant)


class CancelRegistry:
    """Which requests and bulk jobs are cancelled, each remembered until it cannot matter.

    ``horizon_ms`` is the longest request deadline (``limits.max_timeout_ms``);
    ``max_entries`` caps memory even under a storm of cancels (least recently
    used entries go first, logged).
    """

    def __init__(
        self, horizon_ms: int, max_entries: int, clock: Callable[[], int] = now_ms
    ) -> None:
        self._horizon_ms = horizon_ms
        self._entries: TLRUCache[Target, CancelRequest] = TLRUCache(
            maxsize=max_entries,
            ttu=lambda _key, cancel, _now: cancel.cancelled_at + horizon_ms,
            timer=clock,
        )
        self._clock = clock
        self.evicted = 0
        # set by the feed once it has read the topic up to where it stood at start
        self.ready = False

    def add(self, cancel: CancelRequest) -> None:
        """Remember a cancel (the latest ``cancelled_at`` per target wins)."""
        if cancel.cancelled_at + self._horizon_ms <= self._clock():
            return  # covers nothing that can still be pending
        target = _target(cancel)
        known = self._entries.get(target)
        if known is not None and known.cancelled_at >= cancel.cancelled_at:
            return
        if target not in self._entries and len(self._entries) >= self._entries.maxsize:
            self._entries.expire()
            if len(self._entries) >= self._entries.maxsize:
                self.evicted += 1
                if self.evicted == 1:
                    log.warning(
                        "more than %d live cancels: forgetting the least recently used",
                        self._entries.maxsize,
                    )
        self._entries[target] = cancel

    def withdraw(self, key: str) -> None:
        """Forget the cancel with this record key (a tombstone on the cancel topic)."""
        self._entries.pop(_target_of_key(key), None)
        self._entries.pop(("request", key, None), None)  # a request id that looks prefixed

    def cancel_for(self, request: TranslationRequest) -> CancelRequest | None:
        """The cancel covering ``request``, if any: an operator's, or its tenant's own."""
        tenant = tenant_label(request.tenant)
        targets: list[Target] = [
            ("request", request.request_id, None),
            ("request", request.request_id, tenant),
        ]
        if request.job_id is not None:
            targets += [("job", request.job_id, None), ("job", request.job_id, tenant)]
        for target in targets:
            cancel = self._entries.get(target)
            if cancel is not None and cancel.applies_to(request):
                return cancel
        return None

    def __len__(self) -> int:
        self._entries.expire()
        return len(self._entries)


def apply_record(registry: CancelRegistry, key: bytes | None, value: bytes | None) -> bool:
    """Feed one cancel-topic record to ``registry``; False when it was unreadable (skipped)."""

    def add(raw: bytes) -> None:
        registry.add(CancelRequest.from_json(raw))

    return apply_compacted(key, value, add, registry.withdraw, "cancel")


def cancels_for(
    request_ids: Iterable[str] = (),
    job_ids: Iterable[str] = (),
    *,
    requested_by: str | None = None,
    at: int | None = None,
) -> list[CancelRequest]:
    """Cancel records for these request ids and bulk job ids, stamped now (or ``at``)."""
    stamp = now_ms() if at is None else at
    return [
        *(
            CancelRequest(request_id=r, cancelled_at=stamp, requested_by=requested_by)
            for r in request_ids
        ),
        *(CancelRequest(job_id=j, cancelled_at=stamp, requested_by=requested_by) for j in job_ids),
    ]


def publish_cancels(settings: Settings, cancels: Sequence[CancelRequest]) -> int:
    """Publish cancels to ``translate.cancel`` and wait for the broker's acks; returns the count."""
    from pipeline.client import reliable_producer
    from pipeline.kafka.topics import ensure_named

    kafka = settings.kafka
    ensure_named(settings, CANCEL_TOPIC)
    producer = reliable_producer(kafka, "cancel")
    try:
        futures = [
            producer.send(CANCEL_TOPIC, key=c.key.encode(), value=c.to_json()) for c in cancels
        ]
        producer.flush()
        for future in futures:
            future.get(timeout=kafka.request_timeout_ms / 1000)
    finally:
        producer.close(timeout=kafka.producer_close_timeout_s)
    return len(cancels)
