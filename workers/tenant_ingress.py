"""The ingress gate: tenants' own ingress topics onto the shared ingress, each request
stamped with its topic's tenant (:class:`~pipeline.control.tenancy.TenantAdmission`).

Faust cannot subscribe to a topic pattern, and a tenant added while workers run must
be read without a restart, so the gate is an aiokafka consumer of its own:
``translate.ingress.*`` by pattern, in the consumer group ``<app id>-tenant-ingress``
(workers share the partitions), new topics found within
``tenants.ingress_discovery_s``. Its offsets are committed only after every record of
a fetch is acknowledged by the brokers (at least once, as everywhere in the pipeline);
a failed send reads again from the last commit after a pause.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord, TopicPartition
from opentelemetry import trace

from pipeline.contract.codec import RecordRef
from pipeline.contract.pairs import TENANT_INGRESS_PREFIX, ingress_tenant
from pipeline.control.tenancy import TenantAdmission
from pipeline.kafka.clients import aiokafka_options
from pipeline.kafka.records import Outgoing
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.observability import metrics
from pipeline.observability.tracing import SPAN_ADMIT, inject_headers, start_consumer_span
from pipeline.settings import Settings

log = logging.getLogger(__name__)

INGRESS_PATTERN = "^" + re.escape(TENANT_INGRESS_PREFIX) + r"[A-Za-z0-9_-]+$"


class TenantIngressGate:
    """Moves each tenant's ingress records, admitted, onto ``translate.requests``."""

    def __init__(
        self, settings: Settings, app_id: str, worker: str, reply_topics: ReplyTopicCheck
    ) -> None:
        self._settings = settings
        self._group = f"{app_id}-tenant-ingress"
        self._admission = TenantAdmission(settings.replies.prefix, worker)
        self._reply_topics = reply_topics
        # whether the current connection has committed a fetch (run's pause starts over)
        self._committed = False

    async def run(self) -> None:
        """Gate records until cancelled; a broker that goes away is reconnected to, after
        pauses that grow while it fails without gating anything in between."""
        worker = self._settings.worker
        pause_s = worker.retry_initial_s
        while True:
            self._committed = False
            try:
                await self._gate()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._committed:  # it worked for a while: a new fault, not the same one
                    pause_s = worker.retry_initial_s
                log.warning("tenant ingress interrupted (%s); again in %.1fs", exc, pause_s)
                await asyncio.sleep(pause_s)
                pause_s = min(2 * pause_s, worker.retry_max_s)

    async def _gate(self) -> None:
        kafka, tenants = self._settings.kafka, self._settings.tenants
        consumer = AIOKafkaConsumer(
            **aiokafka_options(kafka, "tenant-ingress"),
            group_id=self._group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=int(tenants.ingress_discovery_s * 1000),
        )
        producer = AIOKafkaProducer(
            **aiokafka_options(kafka, "tenant-ingress"), acks="all", enable_idempotence=True
        )
        consumer.subscribe(pattern=INGRESS_PATTERN)
        await consumer.start()
        try:
            await producer.start()
            try:
                while True:
                    fetched = await consumer.getmany(
                        timeout_ms=int(self._settings.worker.max_wait_s * 1000),
                        max_records=self._settings.worker.max_messages,
                    )
                    if fetched:
                        await self._forward(producer, fetched)
                        await consumer.commit()
                        self._committed = True
            finally:
                await producer.stop()
        finally:
            await consumer.stop()

    async def _forward(
        self,
        producer: AIOKafkaProducer,
        fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]],
    ) -> None:
        outgoing: list[Outgoing] = []
        for records in fetched.values():
            for record in records:
                outgoing.extend(self._admit(record))
        copies = await self._copies(outgoing)
        sent = [
            await producer.send(o.topic, o.value, key=o.key, headers=list(o.headers))
            for o in (*outgoing, *copies)
        ]
        await asyncio.gather(*sent)

    def _admit(self, record: ConsumerRecord[bytes, bytes]) -> list[Outgoing]:
        """What one record becomes, its trace going on through an ``admit`` span."""
        ref = RecordRef(record.topic, record.partition, record.offset)
        span = start_consumer_span(
            SPAN_ADMIT,
            record.headers,
            {
                "messaging.system": "kafka",
                "messaging.source.name": ref.topic,
                "messaging.kafka.source.partition": ref.partition,
                "messaging.kafka.message.offset": ref.offset,
            },
        )
        with trace.use_span(span, end_on_exit=True):
            outs = self._admission.admit(record.key, record.value, ref, list(record.headers))
            span.set_attribute("babelstream.admission", outs[0].kind)
        metrics.record_tenant_ingress(ingress_tenant(ref.topic) or "", outs[0].kind)
        return [replace(o, headers=inject_headers(o.headers, span)) for o in outs]

    async def _copies(self, outgoing: list[Outgoing]) -> list[Outgoing]:
        """A refusal's result, copied to the tenant's reply topic if it exists (producing to
        a missing one would wait for metadata until a timeout)."""
        existing = await self._reply_topics.existing(
            {o.reply_to for o in outgoing if o.reply_to is not None}
        )
        return [
            Outgoing(o.reply_to, o.key, o.value, o.headers, o.kind)
            for o in outgoing
            if o.reply_to is not None and o.reply_to in existing
        ]
