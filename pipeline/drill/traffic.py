"""Paced, acknowledged request traffic for drills."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from kafka.errors import KafkaError

from pipeline.client import reliable_producer
from pipeline.contract.messages import TranslationRequest, now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC, Pair
from pipeline.settings import KafkaSettings


class PacedTraffic:
    """Sends ``count`` unique requests at ``rate`` per second, from a background thread.

    Every request is stamped at send time and keyed by pair id, like the
    client does. A request counts as *acknowledged* once the broker confirmed
    it (acks=all, idempotent producer): those are the ids a drill must find
    results for. ``when_acked(n)`` returns an event set once ``n`` requests
    are acknowledged, to time a fault against the traffic.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        pair: Pair,
        *,
        count: int,
        rate: float,
        timeout_ms: int,
        marker: str | None = None,
        text: Callable[[str, int], str] = lambda marker, i: f"Drill {marker} request {i}.",
    ) -> None:
        self.marker = marker or uuid.uuid4().hex[:10]
        self._kafka = kafka
        self._pair = pair
        self._count = count
        self._rate = rate
        self._timeout_ms = timeout_ms
        self._text = text
        self._lock = threading.Lock()
        self.acked: dict[str, int] = {}  # request id -> when it was sent (epoch ms)
        self.failed: dict[str, str] = {}  # request id -> send error
        self._milestones: list[tuple[int, threading.Event]] = []
        self._thread = threading.Thread(target=self._run, name="drill-traffic", daemon=True)
        self.started_at_ms = 0
        self.finished_at_ms = 0

    def request_id(self, i: int) -> str:
        return f"{self.marker}-{i:06d}"

    def when_acked(self, n: int) -> threading.Event:
        """An event set once ``n`` requests are acknowledged."""
        event = threading.Event()
        with self._lock:
            self._milestones.append((n, event))
            if len(self.acked) >= n:
                event.set()
        return event

    def start(self) -> PacedTraffic:
        self._thread.start()
        return self

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    @property
    def sending(self) -> bool:
        """Started and not finished yet."""
        return self._thread.is_alive()

    def _on_ack(self, request_id: str, sent_ms: int) -> None:
        with self._lock:
            self.acked[request_id] = sent_ms
            done = len(self.acked)
            for n, event in self._milestones:
                if done >= n:
                    event.set()

    def _on_error(self, request_id: str, exc: BaseException) -> None:
        with self._lock:
            self.failed[request_id] = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        producer = reliable_producer(self._kafka, "drill")
        self.started_at_ms = now_ms()
        start = time.monotonic()
        try:
            for i in range(self._count):
                time.sleep(max(0.0, start + i / self._rate - time.monotonic()))
                request_id = self.request_id(i)
                sent = now_ms()
                request = TranslationRequest(
                    request_id=request_id,
                    source_lang=self._pair.source,
                    target_lang=self._pair.target,
                    text=self._text(self.marker, i),
                    submitted_at=sent,
                    timeout_ms=self._timeout_ms,
                )
                future = producer.send(
                    REQUESTS_TOPIC, key=self._pair.id.encode(), value=request.to_json()
                )
                future.add_callback(lambda _meta, rid=request_id, t=sent: self._on_ack(rid, t))
                future.add_errback(lambda exc, rid=request_id: self._on_error(rid, exc))
            producer.flush()
        except KafkaError as exc:
            self._on_error("(producer)", exc)
        finally:
            producer.close(timeout=self._kafka.producer_close_timeout_s)
            self.finished_at_ms = now_ms()
