"""Spark Structured Streaming SLA job: windowed figures per pair and priority class.

One query over one Kafka source (``translate.results`` + ``translate.ticks``),
read and parsed once per micro-batch: parse with explicit schemas
(:data:`pipeline.sla.logic.RESULT_FIELDS` / :data:`~pipeline.sla.logic.TICK_FIELDS`; records
that are not JSON or lack a field are skipped) → event time = ``completed_at``
(a tick's ``emitted_at``) → ``withWatermark`` → one shuffle by ``request_id``
that every branch below reads (Spark reuses the exchange, so the source is
scanned once) → the *windows* branch: de-duplicate by ``request_id``
(``dropDuplicatesWithinWatermark``) → ``window(event_time, size[, slide])`` ×
series × priority → figures; and the *late-rows* branch: each result with its
windows, no state → append mode → one ``foreachBatch`` writes both to the sinks.

- *Series*: the result's pair, or ``unsupported`` for every result the router
  gave ``reason = unsupported_pair`` (one series, not a chart per typo).
  *Priority*: ``bulk`` when the result carries a ``job_id``, else ``interactive``.
- *Figures* (over the series' results in the window, counted once each):
  ``count``; ``p50_ms``/``p95_ms``/``p99_ms`` by ``percentile_approx(latency_ms,
  ..., accuracy)`` — the value for p is a latency of the window whose rank is
  within ⌊count/accuracy⌋ of ⌈p·count⌉ (numpy's ``inverted_cdf``), so exact for
  windows of fewer than ``accuracy`` (10 000) results; ``timeout_ratio``:
  ``status = timeout`` or latency above the threshold (the pair's, or
  ``bulk_threshold_ms`` for bulk); ``error_ratio``, ``cancel_ratio``,
  ``rejected_ratio`` by status; ``cache_hit_ratio`` (l1 / l2 / window);
  ``duplicates``: results dropped as repeats of a request id already counted.
  The sinks add the objectives met and the burn rates
  (:func:`pipeline.sla.logic.to_sla_window`).
- *Sketch*: ``kll_sketch_agg_double(latency_ms, sketch_k)`` per window, stored in
  the Parquet history only (``latency_sketch``), merged by ``babelstream sla report``.

*Event time and lateness*: the watermark is the largest event time seen (results
and ticks, all pairs) minus the lateness, updated after each micro-batch. A
window is emitted once, in the micro-batch after the watermark passes its end.
A result counts in each of its windows that is still open when its micro-batch
starts, however old the result itself is. Workers tick every few seconds per
served pair, so a quiet pair's windows close within ``lateness + tick interval
+ 2 triggers + 3 micro-batch run times`` after they end (the batch running when the
tick arrives, the one that reads it, the one that emits); without ticks (no
worker running) the newest ``lateness + window`` stays open until newer input
arrives, and stopping the job never force-emits it (a restart would emit it
twice).

*De-duplication*: a result whose ``request_id`` was counted before is dropped
while the dedup state holds that id: from its first copy's event time until the
watermark passes that time + window + lateness. A copy arriving after that is
counted again. The dedup operator runs on a column ``window + event time``
with its own watermark, so it drops as "late" only rows whose every window
has closed anyway: a row is dropped or counted identically with or without
dedup, and ``duplicates`` (rows received − rows counted, per window) holds
repeats only.

*Late rows*: Spark drops rows behind the watermark with only a global
counter. The late-rows branch passes every result with each of its windows
to ``foreachBatch``, which keeps those the stateful operators of the same
micro-batch dropped: window end − 1 ms at or before the watermark the batch
judges late input by (:func:`pipeline.sla.logic.late_watermark`, from the query's
offset log). They go to ``translate.sla.late`` (LateResult, one per row and
missed window, with the watermark and how far behind it the row was) and a
Parquet history. Rows and windows come from the same micro-batch, so every
row is judged by exactly the watermark that dropped (or kept) it.

*Delivery*: Spark commits a micro-batch to the checkpoint after
``foreachBatch`` returns and re-runs an uncommitted one with the same id and
rows after a restart; each sink skips a batch it already wrote. The Kafka
sinks write each batch and its id in one transaction (:class:`KafkaSink`), so
``read_committed`` readers see every window and late row once, however the job
is killed: Spark's own Kafka sink is at-least-once. Files record the last batch
in :class:`pipeline.sla.logic.BatchLog` under ``<checkpoint>/sinks/``; Parquet files
are named by batch id and content, so a rewrite replaces the same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from kafka import KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

from jobs.session import spark_session
from pipeline.contract.messages import (
    UNSUPPORTED_PAIR_REASON,
    UNSUPPORTED_SERIES,
    LateResult,
    SlaWindow,
    now_ms,
)
from pipeline.kafka.check import admin_client
from pipeline.kafka.clients import (
    kafka_python_options,
    spark_kafka_source_options,
)
from pipeline.settings import Settings, SlaSettings
from pipeline.sla.logic import (
    CACHE_HITS,
    PERCENTILES,
    TICK_FIELDS,
    BatchLog,
    BurnRates,
    JobRun,
    ProgressTracker,
    RunSummary,
    SlaJobError,
    WindowFigures,
    checkpoint_batches,
    describe,
    history_row,
    input_rows,
    late_watermark,
    result_schema_ddl,
    schema_ddl,
    sink_transactional_id,
    spark_interval,
    to_late_result,
    to_sla_window,
)

log = logging.getLogger(__name__)

_POLL_S = 0.5
_STOP_GRACE_S = 30.0
_SEND_TIMEOUT_S = 30.0
_STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def build_session(settings: Settings) -> SparkSession:
    """A Spark session with the Kafka connector jars Maven fetched, its driver on loopback."""
    sla = settings.sla
    return spark_session(
        settings,
        "babelstream-sla",
        master=sla.master,
        driver_memory=sla.driver_memory,
        shuffle_partitions=sla.shuffle_partitions,
        conf={
            "spark.driver.extraJavaOptions": sla.java_options,
            "spark.executor.extraJavaOptions": sla.java_options,
            "spark.driver.host": sla.driver_host,
            "spark.driver.bindAddress": sla.driver_host,
            "spark.sql.streaming.stateStore.providerClass": _STATE_STORES[sla.state_store],
            "spark.sql.session.timeZone": "UTC",
        },
    )


def read_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """Results and ticks from one Kafka source, parsed; ticks have ``is_result`` false.

    Columns: ``is_result``, ``request_id``, ``series``, ``priority``, ``status``,
    ``cache``, ``latency_ms``, ``event_time`` (a result's ``completed_at``, a
    tick's ``emitted_at``): only what the windows need (see :func:`stamped_rows`).
    """
    sla = settings.sla
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_source_options(settings.kafka))
        .option("subscribe", f"{sla.source_topic},{sla.ticks_topic}")
        .option("startingOffsets", sla.starting_offsets)
        # records that aged out while the job was down are gone: go on without them
        .option("failOnDataLoss", "false")
    )
    if sla.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(sla.max_offsets_per_trigger))
    source = reader.load()
    is_tick = F.col("topic") == sla.ticks_topic
    value = F.col("value").cast("string")
    parsed = source.select(
        is_tick.alias("is_tick"),
        F.when(~is_tick, F.from_json(value, result_schema_ddl())).alias("r"),
        F.when(is_tick, F.from_json(value, schema_ddl(TICK_FIELDS))).alias("t"),
    )
    result_complete = (
        F.col("r.pair").isNotNull()
        & F.col("r.status").isNotNull()
        & F.col("r.completed_at").isNotNull()
        & F.col("r.latency_ms").isNotNull()
    )
    complete = parsed.where(
        F.when(F.col("is_tick"), F.col("t.emitted_at").isNotNull()).otherwise(result_complete)
    )
    unsupported = F.col("r.reason") == UNSUPPORTED_PAIR_REASON
    return complete.select(
        (~F.col("is_tick")).alias("is_result"),
        F.col("r.request_id").alias("request_id"),
        F.when(unsupported, F.lit(UNSUPPORTED_SERIES)).otherwise(F.col("r.pair")).alias("series"),
        F.when(F.col("r.job_id").isNotNull(), F.lit("bulk"))
        .otherwise(F.lit("interactive"))
        .alias("priority"),
        F.col("r.status").alias("status"),
        F.col("r.cache").alias("cache"),
        F.col("r.latency_ms").alias("latency_ms"),
        F.timestamp_millis(F.coalesce(F.col("r.completed_at"), F.col("t.emitted_at"))).alias(
            "event_time"
        ),
    )


def threshold_ms(sla: SlaSettings) -> Column:
    """Each row's SLA latency threshold: bulk's, its pair's, or the default."""
    column = F.lit(sla.default_threshold_ms)
    for pair_id, ms in sorted(sla.thresholds_ms.items()):
        column = F.when(F.col("series") == pair_id, F.lit(ms)).otherwise(column)
    return F.when(F.col("priority") == "bulk", F.lit(sla.bulk_threshold_ms)).otherwise(column)


def windowed(stream: DataFrame, sla: SlaSettings) -> DataFrame:
    """Each row once per window it belongs to, stamped with the window's last millisecond.

    Adds ``window_time`` (window end − 1 ms: the event time the job's watermark
    and de-duplication use) and ``slot`` (which of a row's windows this copy
    is, 0 for tumbling windows).
    """
    window_ms = round(sla.window_s * 1000)
    slide_ms = round((sla.slide_s or sla.window_s) * 1000)
    slide = spark_interval(sla.slide_s) if sla.slide_s is not None else None
    rows = stream.withColumn("w", F.window("event_time", spark_interval(sla.window_s), slide))
    slots = -(-window_ms // slide_ms)
    slot = (
        F.pmod(F.floor(F.unix_millis("w.start") / slide_ms), F.lit(slots))
        if slots > 1
        else F.lit(0)
    )
    return rows.select(
        *stream.columns,
        (F.col("w.end") - F.expr("INTERVAL 1 MILLISECOND")).alias("window_time"),
        slot.cast("int").alias("slot"),
    )


def stamped_rows(stream: DataFrame, sla: SlaSettings, late_rows: bool) -> DataFrame:
    """The windowed, watermarked rows every branch of the query reads.

    With more than one branch (de-duplication, late rows) the rows pass one
    shuffle by ``request_id`` after the watermark, and every branch reads
    that same exchange: the dedup operator needs no shuffle of its own (the
    watermark node would not pass on a shuffle below it: Spark 4.1's
    ``EventTimeWatermarkExec`` keeps no partitioning), and the source is read
    and parsed once per micro-batch, not once per branch. Spark reuses an
    exchange only for identical subtrees, columns included, so every branch
    reads the same columns: a column one branch stopped reading would be
    pruned below its exchange and give it a source scan of its own.
    ``tests/integration/test_sla_plan.py`` checks the plan.
    """
    stamped = windowed(stream, sla).withWatermark("window_time", spark_interval(sla.watermark_s))
    return stamped.repartition("request_id") if sla.dedup or late_rows else stamped


def _dedup_keys(sla: SlaSettings) -> list[str]:
    """A result's copies per window slot (tumbling windows: one slot, the request id)."""
    return ["request_id"] if sla.slide_s in (None, sla.window_s) else ["request_id", "slot"]


def _counted_rows(stamped: DataFrame, sla: SlaSettings) -> DataFrame:
    """The watermarked rows, each marked ``counted`` (a first copy) or not (a repeat).

    With dedup, the rows go to the aggregation twice: all of them (``counted``
    false: what was received) and the de-duplicated ones (``counted`` true).
    Both the dedup and the aggregation judge lateness by ``window_time``, so a
    row is dropped as late by both or by neither, and ``received − count`` is
    the number of repeats.
    """
    if not sla.dedup:
        return stamped.withColumn("counted", F.lit(True))
    first_copies = stamped.dropDuplicatesWithinWatermark(_dedup_keys(sla)).withColumn(
        "counted", F.lit(True)
    )
    received = stamped.withColumn("counted", F.lit(False))
    # First copies first: the first branch of the plan to read the shared shuffle holds
    # the exchange itself, the others a ReusedExchange, and Spark's watermark
    # propagation does not look through a ReusedExchange (PropagateWatermarkSimulator
    # walks children only). A dedup reading one would get watermark 0 for good: it
    # would never evict its state (every request id the job ever saw) nor drop late
    # rows. tests/integration/test_sla_plan.py checks the plan and the eviction.
    return first_copies.unionByName(received)


def _occurrences(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def sla_windows(stamped: DataFrame, sla: SlaSettings) -> DataFrame:
    """Watermarked window × series × priority aggregation; one row per finished window."""
    rows = _counted_rows(stamped, sla)
    counted = F.col("is_result") & F.col("counted")
    timed_out = (F.col("status") == "timeout") | (F.col("latency_ms") > threshold_ms(sla))
    latency = F.when(counted, F.col("latency_ms"))
    aggregates = [
        _occurrences(counted).alias("count"),
        _occurrences(F.col("is_result") & ~F.col("counted")).alias("received"),
        F.percentile_approx(latency, list(PERCENTILES), sla.percentile_accuracy).alias(
            "percentiles"
        ),
        _occurrences(counted & timed_out).alias("timeouts"),
        _occurrences(counted & (F.col("status") == "error")).alias("errors"),
        _occurrences(counted & F.col("cache").isin(*CACHE_HITS)).alias("cache_hits"),
        _occurrences(counted & (F.col("status") == "cancelled")).alias("cancelled"),
        _occurrences(counted & (F.col("status") == "rejected")).alias("rejected"),
        # no figure of its own: it keeps event_time, which the late rows need, in this
        # branch's columns, so both branches read one shuffle (see stamped_rows)
        F.max("event_time").alias("last_completed_at"),
    ]
    if sla.sketch_k is not None:
        aggregates.append(
            F.kll_sketch_agg_double(latency.cast("double"), F.lit(sla.sketch_k)).alias("sketch")
        )
    figures = rows.groupBy("window_time", "series", "priority").agg(*aggregates)
    if not sla.dedup:
        figures = figures.withColumn("received", F.col("count"))
    window_end = F.unix_millis("window_time") + 1
    # windows that only ticks touched (or whose every result was a repeat) carry no figures
    return figures.where(F.col("count") > 0).select(
        "series",
        "priority",
        (window_end - round(sla.window_s * 1000)).alias("window_start"),
        window_end.alias("window_end"),
        *(
            name
            for name in (
                "count",
                "received",
                "percentiles",
                "timeouts",
                "errors",
                "cache_hits",
                "cancelled",
                "rejected",
                "last_completed_at",
                "sketch",
            )
            if name != "sketch" or sla.sketch_k is not None
        ),
    )


def windowed_results(stamped: DataFrame, sla: SlaSettings) -> DataFrame:
    """Every row once per window it belongs to, with the window's bounds (no state).

    The late-rows branch: ``foreachBatch`` keeps the results among them whose
    window had closed (:meth:`JobSinks.late_filter`). It reads the columns
    the windows branch reads, ticks included, so that both read the same
    shuffle (see :func:`stamped_rows`): ``slot`` only with sliding windows,
    where it is a dedup key (a tumbling window's slot is a constant, which
    the windows branch never reads).
    """
    window_end = F.unix_millis("window_time") + 1
    return stamped.select(
        *(c for c in stamped.columns if c != "slot" or "slot" in _dedup_keys(sla)),
        F.unix_millis("event_time").alias("completed_at"),
        (window_end - round(sla.window_s * 1000)).alias("window_start"),
        window_end.alias("window_end"),
    )


def job_output(stream: DataFrame, sla: SlaSettings, late_rows: bool) -> DataFrame:
    """What each micro-batch hands to ``foreachBatch``: finished windows and result rows.

    One column per branch, ``window`` (a struct of :func:`sla_windows`' columns)
    and, with ``late_rows``, ``late`` (a struct of :func:`windowed_results`'
    columns); each row fills one of them. The sinks keep the result rows the
    batch judged late (:meth:`JobSinks.late_filter`).
    """
    stamped = stamped_rows(stream, sla, late_rows)
    windows = sla_windows(stamped, sla)
    output = windows.select(F.struct(*windows.columns).alias("window"))
    if not late_rows:
        return output
    results = windowed_results(stamped, sla)
    return output.unionByName(
        results.select(F.struct(*results.columns).alias("late")), allowMissingColumns=True
    )


class KafkaSink:
    """The job's output topics; each micro-batch goes to a topic in one Kafka transaction.

    The transaction carries the batch's records and its mark: offset ``batch id
    + 1`` of the topic's partition 0, committed for a group named like the
    transactional id (:func:`pipeline.sla.logic.sink_transactional_id`) that nothing
    consumes. Spark re-runs its uncommitted batch after a restart: if that
    batch's transaction committed, the mark says so and the batch is skipped; if
    it did not, the restarted producer's ``init_transactions`` aborted it, and it
    is written again. Readers in ``read_committed`` mode (every reader in this
    project) see each batch's records once, whenever the job is killed.
    """

    def __init__(self, settings: Settings) -> None:
        self._kafka = settings.kafka
        self.transactional_id = sink_transactional_id(settings.sla)
        self._producer: KafkaProducer | None = None
        # topic -> the last batch committed to it (None: none yet)
        self._marks: dict[str, int | None] = {}

    def _open(self) -> KafkaProducer:
        if self._producer is None:
            producer = KafkaProducer(
                **kafka_python_options(self._kafka, "sla"),
                acks="all",
                linger_ms=5,
                transactional_id=self.transactional_id,
            )
            # fences a predecessor with this id, and completes or aborts its open transaction
            producer.init_transactions()
            self._producer = producer
        return self._producer

    def prepare(self, topics: Sequence[str]) -> None:
        """Open the producer and read each topic's mark, if not done yet."""
        self._open()  # the predecessor's last transaction is final from here on
        for topic in topics:
            if topic not in self._marks:
                self._marks[topic] = self._read_mark(topic)

    def written(self, topic: str, batch_id: int) -> bool:
        """Whether ``batch_id`` was committed to ``topic`` (by this job or its predecessor)."""
        self.prepare([topic])
        last = self._marks[topic]
        return last is not None and batch_id <= last

    def _read_mark(self, topic: str) -> int | None:
        holder = TopicPartition(topic, 0)
        # On a broker that has never seen a consumer group, the first coordinator
        # lookup creates __consumer_offsets and answers CoordinatorNotAvailable
        # until it is loaded: a retriable fault, not a job failure. A new admin
        # client per attempt, since kafka-python caches the coordinator it found.
        retrying = Retrying(
            retry=retry_if_exception(_retriable_kafka_error),
            wait=wait_exponential_jitter(multiplier=0.1, max=2.0),
            stop=stop_after_delay(self._kafka.request_timeout_ms / 1000),
            before_sleep=lambda state: log.info(
                "reading the mark of %s: %s; retrying",
                topic,
                state.outcome.exception() if state.outcome else "?",
            ),
            reraise=True,
        )
        offsets = retrying(self._list_mark_offsets, holder)
        mark = offsets.get(self.transactional_id, {}).get(holder)
        return mark.offset - 1 if mark is not None and mark.offset > 0 else None

    def _list_mark_offsets(
        self, holder: TopicPartition
    ) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        admin = admin_client(self._kafka, "sla")
        try:
            offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]]
            offsets = admin.list_group_offsets({self.transactional_id: [holder]})
        finally:
            admin.close()
        return offsets

    def send(self, topic: str, records: Sequence[tuple[bytes, bytes]], batch_id: int) -> None:
        """Commit ``(key, value)`` records and ``batch_id``'s mark to ``topic``, atomically."""
        producer = self._open()
        producer.begin_transaction()
        try:
            futures = [producer.send(topic, key=key, value=value) for key, value in records]
            producer.flush()
            for future in futures:
                future.get(timeout=_SEND_TIMEOUT_S)
            producer.send_offsets_to_transaction(
                {TopicPartition(topic, 0): OffsetAndMetadata(batch_id + 1, "", -1)},
                self.transactional_id,
            )
            producer.commit_transaction()
        except Exception:
            with contextlib.suppress(Exception):  # fenced or gone: the broker aborts it
                producer.abort_transaction()
            raise
        self._marks[topic] = batch_id

    def close(self) -> None:
        """Close the producer, if one was opened."""
        if self._producer is not None:
            self._producer.close()


def _retriable_kafka_error(exc: BaseException) -> bool:
    """A fault Kafka itself calls transient (no coordinator yet, a leader moving)."""
    return isinstance(exc, KafkaError) and exc.retriable


class BatchSink(Protocol):
    """One output of the job, written at most once per micro-batch id."""

    def done(self, batch_id: int) -> bool:
        """Whether ``batch_id`` was written already (before a restart, say)."""
        ...

    def write(self, items: list[Any], batch_id: int) -> None: ...


class TopicSink:
    """Items to one Kafka topic, each batch in a transaction with its mark (:class:`KafkaSink`)."""

    def __init__(
        self, kafka: KafkaSink, topic: str, encode: Callable[[Any], tuple[bytes, bytes]]
    ) -> None:
        self._kafka = kafka
        self._topic = topic
        self._encode = encode

    def done(self, batch_id: int) -> bool:
        return self._kafka.written(self._topic, batch_id)

    def write(self, items: list[Any], batch_id: int) -> None:
        self._kafka.send(self._topic, [self._encode(item) for item in items], batch_id)


class LoggedSink:
    """A file or console output and the :class:`BatchLog` it marks after each write.

    Parquet files are named by batch and content, so a write repeated after a
    crash before the mark replaces the same file; the console may print twice.
    """

    def __init__(self, write: Callable[[list[Any], int], None], batch_log: BatchLog) -> None:
        self._write = write
        self._log = batch_log

    def done(self, batch_id: int) -> bool:
        return self._log.done(batch_id)

    def write(self, items: list[Any], batch_id: int) -> None:
        self._write(items, batch_id)
        self._log.mark(batch_id)


def write_parquet(
    folder: Path,
    prefix: str,
    rows: list[dict[str, Any]],
    batch_id: int,
    schema: pa.Schema | None = None,
) -> None:
    """One Parquet file per batch, named by batch id and content (a rewrite replaces it)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    digest = hashlib.blake2b(repr(rows).encode(), digest_size=8).hexdigest()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{prefix}-{batch_id:010d}-{digest}.parquet"
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


class _BatchSinks:
    """Runs each sink once per micro-batch id, however often Spark re-runs the batch."""

    def __init__(self, sinks: dict[str, BatchSink], what: str) -> None:
        self._sinks = sinks
        self._what = what
        self.written = 0

    def write(self, items: list[Any], batch_id: int) -> None:
        pending = [name for name, sink in self._sinks.items() if not sink.done(batch_id)]
        for name in pending:
            self._sinks[name].write(items, batch_id)
        if pending:
            self.written += len(items)
        done = sorted(set(self._sinks) - set(pending))
        log.info(
            "batch %d: %d %s -> %s (already written: %s)",
            batch_id,
            len(items),
            self._what,
            ",".join(pending) or "-",
            ",".join(done) or "-",
        )


def _window_record(item: tuple[SlaWindow, bytes | None]) -> tuple[bytes, bytes]:
    window, _sketch = item
    return window.pair.encode(), window.to_json()


def _late_record(row: LateResult) -> tuple[bytes, bytes]:
    return row.pair.encode(), row.to_json()


class WindowSinks:
    """Each batch's finished windows to every sink."""

    def __init__(self, settings: Settings, kafka: KafkaSink) -> None:
        sla = settings.sla
        self._sla = sla
        self._burn = BurnRates()
        logs = sla.checkpoint_dir / "sinks"
        sinks: dict[str, BatchSink] = {
            "kafka": TopicSink(kafka, sla.sink_topic, _window_record),
            "parquet": LoggedSink(self._to_parquet, BatchLog(logs / "parquet")),
            "console": LoggedSink(self._to_console, BatchLog(logs / "console")),
        }
        self._batches = _BatchSinks({name: sinks[name] for name in sla.sinks}, "windows")
        if "parquet" in sla.sinks:
            self._resume_burn_rates()

    @property
    def windows(self) -> int:
        return self._batches.written

    def _resume_burn_rates(self) -> None:
        """Refill the burn-rate periods from the history, so a restart keeps them whole."""
        from pipeline.sla.history import recent_windows

        for window in recent_windows(self._sla.history_dir, max(self._burn.horizons_ms)):
            self._burn.add(
                window.pair,
                window.priority,
                window.window_end,
                window.count,
                round(window.timeout_ratio * window.count),
            )

    def write(self, windows: list[dict[str, Any]], batch_id: int) -> None:
        """One batch's windows (rows of :func:`sla_windows`), in time order, to every sink."""
        figures = sorted(
            (WindowFigures.from_row(row) for row in windows),
            key=lambda f: (f.window_start, f.series, f.priority),
        )
        if figures:
            self._batches.write(
                [(to_sla_window(f, self._sla, self._burn), f.sketch) for f in figures], batch_id
            )

    def _to_parquet(self, items: list[tuple[SlaWindow, bytes | None]], batch_id: int) -> None:
        from pipeline.sla.history import HISTORY_SCHEMA

        write_parquet(
            self._sla.history_dir,
            "sla",
            [history_row(w, s) for w, s in items],
            batch_id,
            HISTORY_SCHEMA,
        )

    def _to_console(self, items: list[tuple[SlaWindow, bytes | None]], _batch_id: int) -> None:
        for window, _ in items:
            print(describe(window), flush=True)


class LateSinks:
    """Each batch's late rows (results whose window the batch found closed) to the sinks."""

    def __init__(self, settings: Settings, kafka: KafkaSink) -> None:
        sla = settings.sla
        self._sla = sla
        sinks: dict[str, BatchSink] = {}
        if "kafka" in sla.sinks:
            sinks["late-kafka"] = TopicSink(kafka, sla.late_topic, _late_record)
        if "parquet" in sla.sinks:
            logs = sla.checkpoint_dir / "sinks"
            sinks["late-parquet"] = LoggedSink(self._to_parquet, BatchLog(logs / "late-parquet"))
        self._batches = _BatchSinks(sinks, "late rows")

    @property
    def rows(self) -> int:
        return self._batches.written

    def write(self, rows: list[dict[str, Any]], watermark_ms: int, batch_id: int) -> None:
        """One batch's late rows (of :func:`windowed_results`), judged by ``watermark_ms``."""
        if rows:
            self._batches.write(
                sorted(
                    (to_late_result(row, watermark_ms) for row in rows),
                    key=lambda r: (r.window_start, r.pair, r.request_id),
                ),
                batch_id,
            )

    def _to_parquet(self, rows: list[LateResult], batch_id: int) -> None:
        write_parquet(self._sla.late_history_dir, "late", [r.model_dump() for r in rows], batch_id)


class JobSinks:
    """The query's ``foreachBatch`` target: finished windows and late rows of each batch.

    One action per batch: Spark filters the result rows down to the late ones
    (window end − 1 ms at or before the watermark this batch drops late input
    by, :func:`pipeline.sla.logic.late_watermark`), and only the windows and those
    rows reach the driver.
    """

    def __init__(self, settings: Settings, windows: WindowSinks, late: LateSinks | None) -> None:
        self._checkpoint = settings.sla.checkpoint_dir
        self.windows = windows
        self.late = late

    @staticmethod
    def late_filter(watermark_ms: int) -> Column:
        """The rows to collect: windows, and result rows whose window had closed."""
        # the stateful operators' own test: window_time (end - 1 ms) at or before the watermark
        closed = F.col("late.window_end") - 1 <= watermark_ms
        return F.col("window").isNotNull() | (F.col("late.is_result") & closed)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.late is None:
            self.windows.write([row["window"].asDict(True) for row in batch.collect()], batch_id)
            return
        watermark_ms = late_watermark(self._checkpoint, batch_id)
        rows = batch.where(self.late_filter(watermark_ms)).collect()
        self.windows.write(
            [row["window"].asDict(True) for row in rows if row["window"] is not None], batch_id
        )
        self.late.write(
            [row["late"].asDict() for row in rows if row["late"] is not None],
            watermark_ms,
            batch_id,
        )


def _observe(query: StreamingQuery, tracker: ProgressTracker) -> None:
    # as plain JSON: pyspark turns a source's offsets into the text of a Python dict
    for report in tracker.observe(json.loads(p.json) for p in query.recentProgress):
        log.info(
            "batch %s: %s input rows in %s ms, watermark %s",
            report["batchId"],
            input_rows(report),
            (report.get("durationMs") or {}).get("triggerExecution"),
            (report.get("eventTime") or {}).get("watermark"),
        )


class RunningQuery:
    """The started query; started once more if it dies of SPARK-55271 after a re-run batch.

    Spark 4.1's Kafka source fails progress reporting (NullPointerException in
    ``KafkaMicroBatchStream.metrics``, apache/spark#55236) after re-running an
    uncommitted batch on start, because it never asked Kafka for the latest
    offsets. The batch is committed by then, so starting again resumes cleanly.
    """

    def __init__(self, checkpoint: Path, start: Callable[[], StreamingQuery]) -> None:
        self._checkpoint = checkpoint
        self._start = start
        planned, committed = checkpoint_batches(checkpoint)
        # a batch planned but not committed: Spark re-runs it first
        self._replayed = planned if planned > committed else None
        self.query = start()

    def check(self) -> None:
        """Raise the query's failure, after restarting it once if it was SPARK-55271's."""
        if self.query.isActive or self.query.exception() is None:
            return
        replayed, self._replayed = self._replayed, None
        if replayed is None or checkpoint_batches(self._checkpoint)[1] < replayed:
            self.query.awaitTermination()  # raises the StreamingQueryException
        log.warning(
            "the query failed after re-running batch %d (SPARK-55271); starting it again",
            replayed,
        )
        self.query = self._start()


def start_query(spark: SparkSession, settings: Settings, sinks: JobSinks) -> RunningQuery:
    """The job's one streaming query, started."""
    sla = settings.sla
    output = job_output(read_stream(spark, settings), sla, sinks.late is not None)

    def start() -> StreamingQuery:
        return (
            output.writeStream.outputMode("append")
            .foreachBatch(sinks)
            .option("checkpointLocation", str(sla.checkpoint_dir))
            .trigger(processingTime=spark_interval(sla.trigger_s))
            .queryName("babelstream_sla")
            .start()
        )

    return RunningQuery(sla.checkpoint_dir, start)


def supervise(running: RunningQuery, tracker: ProgressTracker, stop: threading.Event) -> None:
    """Follow the query until it fails, ``stop`` is set, or it idles.

    The query is stopped between micro-batches, or after ``_STOP_GRACE_S`` if
    batches run back to back; a batch interrupted that way is re-run on
    restart, and the sinks skip what they already wrote.
    """
    stopping_since: float | None = None
    while True:
        running.check()
        if not running.query.isActive:
            break
        with contextlib.suppress(StreamingQueryException):  # check() handles it next round
            running.query.awaitTermination(_POLL_S)  # type: ignore[arg-type]  # fractional s
        _observe(running.query, tracker)
        if stopping_since is None and (stop.is_set() or tracker.idle()):
            stopping_since = time.monotonic()
        if stopping_since is not None:
            overdue = time.monotonic() - stopping_since > _STOP_GRACE_S
            if running.query.isActive and (overdue or not running.query.status["isTriggerActive"]):
                running.query.stop()
    _observe(running.query, tracker)


_STATE_LAYOUT_ERRORS = (
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
)


def failure_message(text: str, checkpoint: Path) -> str:
    """What a failed query says; what to do when the checkpoint predates the job's state."""
    layout = next((name for name in _STATE_LAYOUT_ERRORS if name in text), None)
    if layout is not None:
        return (
            f"the checkpoint {checkpoint} holds state of an earlier version of the job "
            f"({layout}); start it on a new checkpoint (remove that folder, or give "
            "--checkpoint / BABELSTREAM_SLA__CHECKPOINT_DIR): the windows still open in "
            "the old one are not emitted"
        )
    return f"the SLA query failed: {_root_cause(text)}"


# the last line of a Python traceback: "package.module.SomeError: what happened"
_PYTHON_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")


def _root_cause(text: str) -> str:
    """One line of what Spark says: a ``foreachBatch`` traceback's own error, else its first.

    Spark's message goes on with the Python traceback (for a failure in the
    sinks) and the whole query plan; the job's log has all of that already.
    """
    head = text.split("=== Streaming Query ===", 1)[0]
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in head:
        errors = [line for line in lines if _PYTHON_ERROR_LINE.match(line)]
        if errors:
            return errors[-1]
    return lines[0] if lines else text


def _session_and_ready_sink(settings: Settings, kafka: KafkaSink, late_rows: bool) -> SparkSession:
    """The Spark session, with ``kafka`` opened and its marks read while the JVM started.

    Opening the transactional producer and reading the marks takes about
    0.4 s, which the first micro-batch with windows would otherwise spend.
    """
    sla = settings.sla
    topics = [sla.sink_topic, *([sla.late_topic] if late_rows else [])]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sla-sink") as opening:
        ready = opening.submit(kafka.prepare, topics) if "kafka" in sla.sinks else None
        spark = build_session(settings)
        try:
            if ready is not None:
                ready.result()
        except Exception as exc:
            spark.stop()
            raise SlaJobError(f"the SLA job's Kafka sink could not start: {exc}") from exc
    return spark


def run(
    settings: Settings,
    until_idle_s: float | None = None,
    stop: threading.Event | None = None,
    late_rows: bool = True,
    on_input: Callable[[int], object] | None = None,
    on_session: Callable[[], object] | None = None,
) -> RunSummary:
    """Run the SLA job until ``stop`` is set or, with ``until_idle_s``, input stops.

    ``on_session`` is called once Spark's session is up: PySpark's context sets a
    SIGINT handler of its own as it starts (it cancels every job and raises
    KeyboardInterrupt), which a caller stopping on Ctrl-C must replace again.

    Raises :class:`~pipeline.sla.logic.SlaJobError` when the query fails (the
    checkpoint keeps what it committed; a rerun resumes there).

    ``until_idle_s`` counts from the query's first progress report, then
    from its last micro-batch with results: a running worker's ticks keep
    arriving and close windows, but are not activity. Make it a few triggers
    long, so that the batch emitting the windows the last input closed runs
    before the stop (if it does not, the next run emits them). ``late_rows=False``
    leaves the late-rows branch out. ``on_input`` gets the input rows of each
    micro-batch that had some.
    """
    started = time.monotonic()
    sla = settings.sla
    JobRun(tuple(sla.sinks), sla.sink_topic, now_ms()).write(sla.checkpoint_dir)
    kafka = KafkaSink(settings)
    sinks = JobSinks(
        settings,
        WindowSinks(settings, kafka),
        LateSinks(settings, kafka) if late_rows else None,
    )
    tracker = ProgressTracker(until_idle_s, on_input=on_input, activity_topic=sla.source_topic)
    try:
        spark = _session_and_ready_sink(settings, kafka, late_rows)
        if on_session is not None:
            on_session()
        running: RunningQuery | None = None
        try:
            running = start_query(spark, settings, sinks)
            supervise(running, tracker, stop or threading.Event())
        except StreamingQueryException as exc:
            raise SlaJobError(failure_message(str(exc), sla.checkpoint_dir)) from exc
        finally:
            if running is not None and running.query.isActive:
                running.query.stop()
            spark.stop()
    finally:
        kafka.close()
    return RunSummary(
        tuple(tracker.input_batches),
        sinks.windows.windows,
        time.monotonic() - started,
        sinks.late.rows if sinks.late is not None else 0,
        results=tracker.results,
    )
