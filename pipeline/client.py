"""Producer-side client (kafka-python): submit requests, or translate and wait for results."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from pipeline.contract.codec import check_limits, describe_validation
from pipeline.contract.messages import (
    GlossaryTerm,
    Headers,
    TextFormat,
    TranslationRequest,
    TranslationResult,
    now_ms,
)
from pipeline.contract.pairs import (
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    Pair,
    tenant_ingress_topic,
    tenant_reply_prefix,
)
from pipeline.errors import ContractError, LimitExceeded, StackError
from pipeline.kafka.check import kafka_python_client
from pipeline.kafka.reply_topics import ReplyTopic
from pipeline.observability.tracing import (
    SPAN_SUBMIT,
    extract_context,
    has_trace_context,
    inject_headers,
    tracer,
)
from pipeline.settings import KafkaSettings, LimitSettings, ReplySettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """Per-request fields that are not the text itself."""

    timeout_ms: int | None = None
    tenant: str | None = None
    domain: str | None = None
    metadata: dict[str, str] | None = None
    reply_to: str | None = None
    # text fidelity: how the text is parsed, a stored glossary, inline (source, target) terms
    text_format: TextFormat | None = None
    glossary: str | None = None
    terms: tuple[tuple[str, str | None], ...] = ()


@dataclass
class ReplyBatch:
    """Results of one ``translate`` call, in request order; ``missing`` timed out client-side."""

    results: dict[str, TranslationResult] = field(default_factory=dict)
    request_ids: list[str] = field(default_factory=list)
    # results read that belong to other callers (0 with a reply topic of one's own)
    foreign: int = 0

    @property
    def missing(self) -> list[str]:
        return [rid for rid in self.request_ids if rid not in self.results]

    @property
    def ordered(self) -> list[TranslationResult | None]:
        return [self.results.get(rid) for rid in self.request_ids]

    @property
    def all_ok(self) -> bool:
        return not self.missing and all(r.status == "ok" for r in self.results.values())


def reliable_producer(settings: KafkaSettings, role: str, linger_ms: int = 5) -> KafkaProducer:
    """A kafka-python producer that never loses an acknowledged record.

    acks=all and an idempotent producer with retries: a retried send is not
    written twice.
    """
    return kafka_python_client(
        KafkaProducer,
        settings,
        role,
        acks="all",
        retries=10,
        enable_idempotence=True,
        linger_ms=linger_ms,
    )


class ProducerOwner:
    """Owns a :func:`reliable_producer`; as a context manager, leaving closes it."""

    def __init__(self, settings: KafkaSettings, role: str, linger_ms: int = 5) -> None:
        self._settings = settings
        self._producer = reliable_producer(settings, role, linger_ms)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Send what is buffered and close (waiting ``kafka.producer_close_timeout_s``)."""
        self._producer.close(timeout=self._settings.producer_close_timeout_s)


def new_request_id() -> str:
    return uuid.uuid4().hex


def build_requests(
    texts: Iterable[str], pair: Pair, options: RequestOptions = RequestOptions()
) -> list[TranslationRequest]:
    """One request per text, stamped with ``submitted_at`` now.

    Raises :class:`ContractError` (one line: which text, which field, why)
    when a request would break the schema.
    """
    submitted = now_ms()
    requests = []
    for number, text in enumerate(texts, 1):
        try:
            requests.append(
                TranslationRequest(
                    request_id=new_request_id(),
                    source_lang=pair.source,
                    target_lang=pair.target,
                    text=text,
                    submitted_at=submitted,
                    timeout_ms=options.timeout_ms,
                    tenant=options.tenant,
                    domain=options.domain,
                    metadata=options.metadata,
                    reply_to=options.reply_to,
                    format=options.text_format,
                    glossary=options.glossary,
                    terms=[GlossaryTerm(source=s, target=t) for s, t in options.terms] or None,
                )
            )
        except ValidationError as exc:
            raise ContractError(f"text {number}: {describe_validation(exc)}") from None
    return requests


def check_sendable(requests: Sequence[TranslationRequest], limits: LimitSettings) -> None:
    """Raise :class:`LimitExceeded` for the first request a router would dead-letter.

    The router checks the same deployment limits; refusing here spares the
    caller a wait for a result that would never come.
    """
    for number, request in enumerate(requests, 1):
        violation = check_limits(request, limits)
        if violation:
            raise LimitExceeded(f"text {number}: {violation}; nothing was sent")


def check_own(requests: Sequence[TranslationRequest], tenant: str, replies_prefix: str) -> None:
    """ContractError (one line, nothing sent) for a request that ``tenant``'s client may
    not send: one naming another tenant, or a reply topic outside the tenant's own."""
    own_replies = tenant_reply_prefix(replies_prefix, tenant)
    for number, request in enumerate(requests, 1):
        if request.tenant not in (None, tenant):
            raise ContractError(
                f"text {number}: names tenant {request.tenant!r}, but this client is "
                f"tenant {tenant!r}'s; nothing was sent"
            )
        if request.reply_to is not None and not request.reply_to.startswith(own_replies):
            raise ContractError(
                f"text {number}: reply topic {request.reply_to!r} is not tenant {tenant!r}'s "
                f"(its names start with {own_replies!r}); nothing was sent"
            )


class TranslationClient(ProducerOwner):
    """Publishes :class:`TranslationRequest` s and collects their results.

    Requests are keyed by pair id on ``translate.requests`` (acks=all,
    idempotent producer with retries), so one pair's requests stay in order;
    a tenant's client (``tenant``) writes them to the tenant's own ingress,
    ``translate.ingress.<tenant>``, instead. Every request is checked against
    the deployment ``limits`` first; a request over a limit raises
    :class:`LimitExceeded` and nothing is sent.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        limits: LimitSettings | None = None,
        replies: ReplySettings | None = None,
        reply_topic: str | None = None,
        tenant: str | None = None,
    ) -> None:
        """``replies`` given: each :meth:`translate` call reads a reply topic of its own
        (``reply_topic``, kept, or an ephemeral one deleted after the call) instead of
        scanning the shared results topic. ``tenant`` given (``tenants.client_tenant``):
        this client is that tenant's, with its Kafka user; it may read only reply topics
        under ``<replies.prefix><tenant>.``, so :meth:`translate` always uses one."""
        super().__init__(settings, "client")
        self._limits = limits or LimitSettings()
        self._tenant = tenant
        self._replies = replies if replies is not None or tenant is None else ReplySettings()
        self._reply_topic = reply_topic
        self.ingress = tenant_ingress_topic(tenant) if tenant is not None else REQUESTS_TOPIC

    def submit(
        self,
        requests: Sequence[TranslationRequest],
        headers: Headers | None = None,
        topic: str | None = None,
    ) -> list[str]:
        """Publish requests to ``topic`` (default: :attr:`ingress`) and wait until the
        broker acknowledged each one.

        Each request gets a ``submit`` span (a child of the current span, or of
        a ``traceparent`` already in ``headers``) whose W3C trace context is
        injected into the record's headers. A tenant's client refuses requests
        that name another tenant or a reply topic not its own (ContractError,
        nothing sent): the workers would only dead-letter them.
        """
        topic = topic or self.ingress
        check_sendable(requests, self._limits)
        self._check_own(requests)
        parent = extract_context(headers) if has_trace_context(headers) else None
        futures = []
        for request in requests:
            with tracer().start_as_current_span(
                SPAN_SUBMIT,
                context=parent,
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": "kafka",
                    "messaging.destination.name": topic,
                    "babelstream.request_id": request.request_id,
                    "babelstream.pair": request.pair.id,
                },
            ) as span:
                futures.append(
                    self._producer.send(
                        topic,
                        key=request.pair.id.encode(),
                        value=request.to_json(),
                        headers=inject_headers(headers, span),
                    )
                )
        self._producer.flush()
        for future in futures:
            future.get(timeout=self._settings.request_timeout_ms / 1000)
        return [request.request_id for request in requests]

    def translate(
        self,
        requests: Sequence[TranslationRequest],
        timeout_s: float,
        headers: Headers | None = None,
    ) -> ReplyBatch:
        """Submit and wait for one result per request id (first one wins)."""
        check_sendable(requests, self._limits)
        self._check_own(requests)
        if self._replies is None:
            return self._translate(requests, timeout_s, headers)
        with ReplyTopic.for_call(
            self._settings, self._replies, self._reply_topic, label=self._tenant
        ) as topic:
            own = [
                r if r.reply_to else r.model_copy(update={"reply_to": topic.name}) for r in requests
            ]
            return self._translate(own, timeout_s, headers)

    def _check_own(self, requests: Sequence[TranslationRequest]) -> None:
        if self._tenant is not None:
            check_own(requests, self._tenant, (self._replies or ReplySettings()).prefix)

    def _translate(
        self,
        requests: Sequence[TranslationRequest],
        timeout_s: float,
        headers: Headers | None,
    ) -> ReplyBatch:
        replies = ReplyBatch(request_ids=[r.request_id for r in requests])
        topics = {r.reply_to or RESULTS_TOPIC for r in requests}
        with ResultListener(self._settings, topics) as listener:
            self.submit(requests, headers)
            listener.collect(replies, timeout_s)
        return replies


class ResultListener:
    """Reads result topics from a fixed start: their current end (positions fixed before
    submitting), or the first record at or after ``since_ms`` (epoch ms)."""

    def __init__(
        self, settings: KafkaSettings, topics: Iterable[str], since_ms: int | None = None
    ) -> None:
        self._consumer = kafka_python_client(
            KafkaConsumer,
            settings,
            "replies",
            group_id=None,
            enable_auto_commit=False,
        )
        partitions = [
            TopicPartition(topic, p)
            for topic in sorted(topics)
            for p in sorted(self._partitions_of(topic))
        ]
        self._consumer.assign(partitions)
        self._ends: dict[TopicPartition, int] = self._consumer.end_offsets(partitions)
        if since_ms is None:
            self._consumer.seek_to_end(*partitions)
        else:
            starts = self._consumer.offsets_for_times({tp: since_ms for tp in partitions})
            for tp in partitions:
                found = starts.get(tp)
                self._consumer.seek(tp, found.offset if found is not None else self._ends[tp])
        for tp in partitions:  # resolve the lazy seek now, before anything is sent
            self._consumer.position(tp)

    def _partitions_of(self, topic: str) -> set[int]:
        deadline = time.monotonic() + 10
        while True:
            partitions: set[int] | None = self._consumer.partitions_for_topic(topic)
            if partitions:
                return partitions
            if time.monotonic() > deadline:
                raise StackError(
                    f"topic {topic!r} does not exist; create the topics with `babelstream up`"
                )
            time.sleep(0.1)

    def __enter__(self) -> ResultListener:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._consumer.close()

    def collect(self, replies: ReplyBatch, timeout_s: float) -> None:
        """Poll until every awaited id has a result or the timeout passes."""
        deadline = time.monotonic() + timeout_s
        while replies.missing and time.monotonic() < deadline:
            self._poll(replies)

    def scan(self, replies: ReplyBatch, wait_s: float = 0.0) -> None:
        """Read up to the end offsets the topics had when the listener started, then go on
        for ``wait_s`` seconds more, or stop as soon as every awaited id has a result."""
        deadline = time.monotonic() + wait_s
        while replies.missing and (not self._caught_up() or time.monotonic() < deadline):
            self._poll(replies)

    def catch_up(self, replies: ReplyBatch, limit_s: float) -> None:
        """Read what the topics hold now (their end offsets at this call), at most
        ``limit_s`` seconds, or until every awaited id has a result."""
        ends = self._consumer.end_offsets(list(self._ends))
        deadline = time.monotonic() + limit_s
        while (
            replies.missing
            and time.monotonic() < deadline
            and any(self._consumer.position(tp) < end for tp, end in ends.items())
        ):
            self._poll(replies)

    def _caught_up(self) -> bool:
        return all(self._consumer.position(tp) >= end for tp, end in self._ends.items())

    def _poll(self, replies: ReplyBatch) -> None:
        wanted = set(replies.missing)
        ours = set(replies.request_ids)
        for records in self._consumer.poll(timeout_ms=200).values():
            for record in records:
                try:
                    result = TranslationResult.from_json(record.value)
                except ValidationError:
                    log.warning("skipping malformed result at %s", record.offset)
                    continue
                if result.request_id in wanted:  # the first result of an id wins
                    replies.results[result.request_id] = result
                    wanted.discard(result.request_id)
                elif result.request_id not in ours:
                    replies.foreign += 1


def fetch_results(
    settings: KafkaSettings,
    request_ids: Sequence[str],
    since_ms: int,
    wait_s: float = 0.0,
    topic: str = RESULTS_TOPIC,
) -> ReplyBatch:
    """The first result of each id written to ``topic`` at or after ``since_ms`` (epoch ms).

    Reads up to the end offsets the topic had when the call started, then
    ``wait_s`` seconds longer for ids still missing (see :meth:`ResultListener.scan`).
    """
    replies = ReplyBatch(request_ids=list(request_ids))
    with ResultListener(settings, [topic], since_ms=since_ms) as listener:
        listener.scan(replies, wait_s)
    return replies
