"""Spark Structured Streaming SLA job: windowed figures per pair and priority class.

Two queries over one Kafka source (``translate.results`` + ``translate.ticks``):

**Windows** (checkpoint ``<checkpoint>``): parse with explicit schemas
(:data:`pipeline.sla.RESULT_FIELDS` / :data:`~pipeline.sla.TICK_FIELDS`; records
that are not JSON or lack a field are skipped) → event time = ``completed_at``
(a tick's ``emitted_at``) → ``withWatermark`` → de-duplicate by ``request_id``
(``dropDuplicatesWithinWatermark``) → ``window(event_time, size[, slide])`` ×
series × priority → figures → append mode → ``foreachBatch`` to the sinks.

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
  (:func:`pipeline.sla.to_sla_window`).
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

**Late rows** (checkpoint ``<checkpoint>/late``): a second, stateless query
over the same source assigns each result its windows and keeps those whose
window the windows query had closed when it read the row: ``translate.sla.late``
(LateResult, one per row and missed window, with the watermark and how far
behind it the row was) and a Parquet history. Spark drops such rows with only
a global counter; the side query compares each row's window with the
windows query's watermark. Batch edges: the two queries cut the stream into
different micro-batches, so the late query does not use the windows query's
latest watermark (a row read just before the watermark moved would be
misjudged) but the one of the windows batch that read the row, from the
windows query's offset log (:class:`pipeline.sla.OffsetLog`; Spark ≥ 3.4 drops
a batch's late input by the previous batch's watermark). It waits for the
windows query to plan that batch; the approximation left is at a stop: rows
the windows query has not read yet are not judged (and, with the late query's
batch committed, never will be), and rows read by batches the offset log no
longer retains (over 100 batches behind) are skipped.

*Delivery*: Spark commits a micro-batch to the checkpoint after
``foreachBatch`` returns and re-runs an uncommitted one with the same id and
rows after a restart. Each sink records the last batch it wrote
(:class:`pipeline.sla.BatchLog` under ``<checkpoint>/sinks/``) and skips batches
it already wrote; Parquet files are named by batch id and content, so a
rewrite replaces the same file. The one gap left is a crash between a Kafka
flush and its log update, which re-sends that batch's records (at-least-once,
like Spark's own Kafka sink).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from kafka import KafkaProducer
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from pipeline.kafka_clients import kafka_python_options, spark_kafka_options
from pipeline.messages import UNSUPPORTED_PAIR_REASON, UNSUPPORTED_SERIES, LateResult, SlaWindow
from pipeline.settings import Settings, SlaSettings
from pipeline.sla import (
    CACHE_HITS,
    PERCENTILES,
    TICK_FIELDS,
    BatchLog,
    BurnRates,
    OffsetLog,
    ProgressTracker,
    RunSummary,
    SlaJobError,
    WindowFigures,
    checkpoint_batches,
    describe,
    history_row,
    input_rows,
    result_schema_ddl,
    schema_ddl,
    spark_interval,
    to_late_result,
    to_sla_window,
)
from pipeline.stack.jars import spark_kafka_jars

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
    jars = spark_kafka_jars(settings, log.info)
    spark = (
        SparkSession.builder.master(sla.master)
        .appName("babelstream-sla")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.driver.memory", sla.driver_memory)
        .config("spark.driver.host", sla.driver_host)
        .config("spark.driver.bindAddress", sla.driver_host)
        .config("spark.sql.shuffle.partitions", str(sla.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", _STATE_STORES[sla.state_store])
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def read_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """Results and ticks from one Kafka source, parsed; ticks have ``is_result`` false.

    Columns: ``kafka_topic``, ``kafka_partition``, ``kafka_offset``, ``is_result``,
    ``request_id``, ``series``, ``priority``, ``status``, ``cache``, ``latency_ms``,
    ``completed_at``, ``event_time``.
    """
    sla = settings.sla
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(settings.kafka))
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
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
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
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        (~F.col("is_tick")).alias("is_result"),
        F.col("r.request_id").alias("request_id"),
        F.when(unsupported, F.lit(UNSUPPORTED_SERIES)).otherwise(F.col("r.pair")).alias("series"),
        F.when(F.col("r.job_id").isNotNull(), F.lit("bulk"))
        .otherwise(F.lit("interactive"))
        .alias("priority"),
        F.col("r.status").alias("status"),
        F.col("r.cache").alias("cache"),
        F.col("r.latency_ms").alias("latency_ms"),
        F.col("r.completed_at").alias("completed_at"),
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
    is, 0 for tumbling windows), drops ``event_time``.
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
        *(name for name in stream.columns if name != "event_time"),
        (F.col("w.end") - F.expr("INTERVAL 1 MILLISECOND")).alias("window_time"),
        slot.cast("int").alias("slot"),
    )


def _counted_rows(stream: DataFrame, sla: SlaSettings) -> DataFrame:
    """The watermarked rows, each marked ``counted`` (a first copy) or not (a repeat).

    With dedup, the rows go to the aggregation twice: all of them (``counted``
    false: what was received) and the de-duplicated ones (``counted`` true).
    Both the dedup and the aggregation judge lateness by ``window_time``, so a
    row is dropped as late by both or by neither, and ``received − count`` is
    the number of repeats.
    """
    stamped = windowed(stream, sla).withWatermark("window_time", spark_interval(sla.watermark_s))
    if not sla.dedup:
        return stamped.withColumn("counted", F.lit(True))
    received = stamped.withColumn("counted", F.lit(False))
    first_copies = stamped.dropDuplicatesWithinWatermark(["request_id", "slot"]).withColumn(
        "counted", F.lit(True)
    )
    return received.unionByName(first_copies)


def _occurrences(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def sla_windows(stream: DataFrame, sla: SlaSettings) -> DataFrame:
    """Watermarked window × series × priority aggregation; one row per finished window."""
    rows = _counted_rows(stream, sla)
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
                "sketch",
            )
            if name != "sketch" or sla.sketch_k is not None
        ),
    )


def windowed_results(stream: DataFrame, sla: SlaSettings) -> DataFrame:
    """Each result once per window it belongs to (no state, no watermark): the late query."""
    return windowed(stream.where(F.col("is_result")), sla).select(
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "request_id",
        "series",
        "priority",
        "status",
        "latency_ms",
        "completed_at",
        (F.unix_millis("window_time") + 1 - round(sla.window_s * 1000)).alias("window_start"),
        (F.unix_millis("window_time") + 1).alias("window_end"),
    )


class KafkaSink:
    """A kafka-python producer for the job's output topics, opened on first use."""

    def __init__(self, settings: Settings) -> None:
        self._kafka = settings.kafka
        self._producer: KafkaProducer | None = None

    def send(self, topic: str, records: Sequence[tuple[bytes, bytes]]) -> None:
        """Produce ``(key, value)`` records and wait until every one is acknowledged."""
        if self._producer is None:
            self._producer = KafkaProducer(
                **kafka_python_options(self._kafka, "sla"), acks="all", linger_ms=5
            )
        futures = [self._producer.send(topic, key=key, value=value) for key, value in records]
        self._producer.flush()
        for future in futures:
            future.get(timeout=_SEND_TIMEOUT_S)

    def close(self) -> None:
        """Flush and close the producer, if one was opened."""
        if self._producer is not None:
            self._producer.close()


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

    def __init__(
        self, checkpoint: Path, sinks: dict[str, Callable[[list[Any], int], None]], what: str
    ) -> None:
        self._sinks = sinks
        self._logs = {name: BatchLog(checkpoint / "sinks" / name) for name in sinks}
        self._what = what
        self.written = 0

    def write(self, items: list[Any], batch_id: int) -> None:
        pending = [name for name, batch_log in self._logs.items() if not batch_log.done(batch_id)]
        for name in pending:
            self._sinks[name](items, batch_id)
            self._logs[name].mark(batch_id)
        if pending:
            self.written += len(items)
        done = sorted(set(self._logs) - set(pending))
        log.info(
            "batch %d: %d %s -> %s (already written: %s)",
            batch_id,
            len(items),
            self._what,
            ",".join(pending) or "-",
            ",".join(done) or "-",
        )


class WindowSinks:
    """The windows query's ``foreachBatch`` target: each batch's finished windows to every sink."""

    def __init__(self, settings: Settings, kafka: KafkaSink) -> None:
        sla = settings.sla
        self._sla = sla
        self._kafka = kafka
        self._burn = BurnRates()
        writers: dict[str, Callable[[list[Any], int], None]] = {
            "kafka": self._to_kafka,
            "parquet": self._to_parquet,
            "console": self._to_console,
        }
        self._batches = _BatchSinks(
            sla.checkpoint_dir, {s: writers[s] for s in sla.sinks}, "windows"
        )
        if "parquet" in sla.sinks:
            self._resume_burn_rates()

    @property
    def windows(self) -> int:
        return self._batches.written

    def _resume_burn_rates(self) -> None:
        """Refill the burn-rate periods from the history, so a restart keeps them whole."""
        from pipeline.sla_history import recent_windows

        for window in recent_windows(self._sla.history_dir, max(self._burn.horizons_ms)):
            self._burn.add(
                window.pair,
                window.priority,
                window.window_end,
                window.count,
                round(window.timeout_ratio * window.count),
            )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(
            (WindowFigures.from_row(row.asDict(recursive=True)) for row in batch.collect()),
            key=lambda f: (f.window_start, f.series, f.priority),
        )
        if rows:
            self._batches.write(
                [(to_sla_window(f, self._sla, self._burn), f.sketch) for f in rows], batch_id
            )

    def _to_kafka(self, items: list[tuple[SlaWindow, bytes | None]], _batch_id: int) -> None:
        self._kafka.send(self._sla.sink_topic, [(w.pair.encode(), w.to_json()) for w, _ in items])

    def _to_parquet(self, items: list[tuple[SlaWindow, bytes | None]], batch_id: int) -> None:
        from pipeline.sla_history import HISTORY_SCHEMA

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
    """The late query's ``foreachBatch`` target: rows whose window the windows query closed.

    Each row is judged by the watermark the windows query judged it by: the
    windows query's offset log (:class:`pipeline.sla.OffsetLog`) says which of
    its batches read the row's offset and with which watermark. The late batch
    first waits until the windows query has planned batches covering all its
    rows (it is usually ahead); when the job is stopping it judges what is
    covered and leaves the rest (the only approximation left).
    """

    def __init__(self, settings: Settings, kafka: KafkaSink, halt: threading.Event) -> None:
        sla = settings.sla
        self._sla = sla
        self._kafka = kafka
        self._halt = halt
        self._offsets = OffsetLog(sla.checkpoint_dir)
        writers: dict[str, Callable[[list[Any], int], None]] = {}
        if "kafka" in sla.sinks:
            writers["late-kafka"] = self._to_kafka
        if "parquet" in sla.sinks:
            writers["late-parquet"] = self._to_parquet
        self._batches = _BatchSinks(sla.checkpoint_dir / "late", writers, "late rows")

    @property
    def rows(self) -> int:
        return self._batches.written

    def _wait_for_coverage(self, batch: DataFrame) -> None:
        needed = {
            (row[0], row[1]): row[2]
            for row in batch.groupBy("kafka_topic", "kafka_partition")
            .agg(F.max("kafka_offset"))
            .collect()
        }
        while not self._offsets.covers(needed) and not self._halt.wait(_POLL_S):
            pass

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._wait_for_coverage(batch)
        ranges = self._offsets.ranges()
        if not ranges:
            return
        judged = batch.sparkSession.createDataFrame(
            [(r.topic, r.partition, r.start, r.end, r.watermark_ms) for r in ranges],
            "r_topic STRING, r_partition INT, r_start BIGINT, r_end BIGINT, watermark BIGINT",
        )
        read_by = (
            (F.col("kafka_topic") == F.col("r_topic"))
            & (F.col("kafka_partition") == F.col("r_partition"))
            & (F.col("kafka_offset") >= F.col("r_start"))
            & (F.col("kafka_offset") < F.col("r_end"))
        )
        # the aggregation's own test: window_time (end - 1 ms) at or before the watermark
        late = (
            batch.join(F.broadcast(judged), read_by)
            .where(F.col("window_end") - 1 <= F.col("watermark"))
            .collect()
        )
        if late:
            self._batches.write(
                sorted(
                    (to_late_result(row.asDict(), int(row["watermark"])) for row in late),
                    key=lambda r: (r.window_start, r.pair, r.request_id),
                ),
                batch_id,
            )

    def _to_kafka(self, rows: list[LateResult], _batch_id: int) -> None:
        self._kafka.send(self._sla.late_topic, [(r.pair.encode(), r.to_json()) for r in rows])

    def _to_parquet(self, rows: list[LateResult], batch_id: int) -> None:
        write_parquet(self._sla.late_history_dir, "late", [r.model_dump() for r in rows], batch_id)


@dataclass
class QuerySpec:
    """One streaming query of the job: how to start it, where it checkpoints."""

    name: str
    checkpoint: Path
    start: Callable[[], StreamingQuery]


def query_specs(
    spark: SparkSession, settings: Settings, windows: WindowSinks, late: LateSinks | None
) -> list[QuerySpec]:
    """The windows query and (unless disabled) the late-rows query."""
    sla = settings.sla
    stream = read_stream(spark, settings)
    trigger = spark_interval(sla.trigger_s)

    def start_windows() -> StreamingQuery:
        return (
            sla_windows(stream, sla)
            .writeStream.outputMode("append")
            .foreachBatch(windows)
            .option("checkpointLocation", str(sla.checkpoint_dir))
            .trigger(processingTime=trigger)
            .queryName("babelstream_sla")
            .start()
        )

    specs = [QuerySpec("windows", sla.checkpoint_dir, start_windows)]
    if late is not None:

        def start_late() -> StreamingQuery:
            return (
                windowed_results(stream, sla)
                .writeStream.outputMode("append")
                .foreachBatch(late)
                .option("checkpointLocation", str(sla.checkpoint_dir / "late"))
                .trigger(processingTime=trigger)
                .queryName("babelstream_sla_late")
                .start()
            )

        specs.append(QuerySpec("late", sla.checkpoint_dir / "late", start_late))
    return specs


def _observe(query: StreamingQuery, tracker: ProgressTracker) -> None:
    for report in tracker.observe(query.recentProgress):
        log.info(
            "batch %s: %s input rows in %s ms, watermark %s",
            report["batchId"],
            input_rows(report, tracker.scans),
            (report.get("durationMs") or {}).get("triggerExecution"),
            (report.get("eventTime") or {}).get("watermark"),
        )


class RunningQuery:
    """A started query; started once more if it dies of SPARK-55271 after a re-run batch.

    Spark 4.1's Kafka source fails progress reporting (NullPointerException in
    ``KafkaMicroBatchStream.metrics``, apache/spark#55236) after re-running an
    uncommitted batch on start, because it never asked Kafka for the latest
    offsets. The batch is committed by then, so starting again resumes cleanly.
    """

    def __init__(self, spec: QuerySpec) -> None:
        self.spec = spec
        planned, committed = checkpoint_batches(spec.checkpoint)
        # a batch planned but not committed: Spark re-runs it first
        self._replayed = planned if planned > committed else None
        self.query = spec.start()

    def check(self) -> None:
        """Raise the query's failure, after restarting it once if it was SPARK-55271's."""
        if self.query.isActive or self.query.exception() is None:
            return
        replayed, self._replayed = self._replayed, None
        if replayed is None or checkpoint_batches(self.spec.checkpoint)[1] < replayed:
            self.query.awaitTermination()  # raises the StreamingQueryException
        log.warning(
            "the %s query failed after re-running batch %d (SPARK-55271); starting it again",
            self.spec.name,
            replayed,
        )
        self.query = self.spec.start()


def supervise(
    queries: list[RunningQuery],
    tracker: ProgressTracker,
    stop: threading.Event,
    halt: threading.Event,
) -> None:
    """Follow the queries until one fails, ``stop`` is set, or the windows query idles.

    ``queries[0]`` is the windows query. Each query is stopped between
    micro-batches, or after ``_STOP_GRACE_S`` if batches run back to back; a
    batch interrupted that way is re-run on restart, and the sinks skip what
    they already wrote. ``halt`` is set when stopping begins.
    """
    windows = queries[0]
    stopping_since: float | None = None
    while True:
        for running in queries:
            running.check()
        if not windows.query.isActive:
            break
        with contextlib.suppress(StreamingQueryException):  # check() handles it next round
            windows.query.awaitTermination(_POLL_S)  # type: ignore[arg-type]  # fractional s
        _observe(windows.query, tracker)
        if stopping_since is None and (stop.is_set() or tracker.idle()):
            stopping_since = time.monotonic()
            halt.set()
        if stopping_since is not None:
            overdue = time.monotonic() - stopping_since > _STOP_GRACE_S
            for running in queries:
                if running.query.isActive and (
                    overdue or not running.query.status["isTriggerActive"]
                ):
                    running.query.stop()
    _observe(windows.query, tracker)


def run(
    settings: Settings,
    until_idle_s: float | None = None,
    stop: threading.Event | None = None,
    late_rows: bool = True,
    on_input: Callable[[int], object] | None = None,
) -> RunSummary:
    """Run the SLA job until ``stop`` is set or, with ``until_idle_s``, input stops.

    Raises :class:`~pipeline.sla.SlaJobError` when a query fails (the
    checkpoints keep what they committed; a rerun resumes there).

    ``until_idle_s`` counts from the windows query's first progress report,
    then from its last micro-batch with input; make it a few triggers long,
    so that the batch emitting the windows the last input closed runs before
    the stop (if it does not, the next run emits them). ``late_rows=False``
    runs the windows query alone. ``on_input`` gets the input rows of each
    micro-batch that had some.
    """
    started = time.monotonic()
    spark = build_session(settings)
    kafka = KafkaSink(settings)
    windows = WindowSinks(settings, kafka)
    running: list[RunningQuery] = []
    halt = threading.Event()
    late = LateSinks(settings, kafka, halt) if late_rows else None
    # the dedup branch scans the source a second time (see _counted_rows)
    tracker = ProgressTracker(until_idle_s, on_input=on_input, scans=2 if settings.sla.dedup else 1)
    try:
        for spec in query_specs(spark, settings, windows, late):
            running.append(RunningQuery(spec))
        supervise(running, tracker, stop or threading.Event(), halt)
    except StreamingQueryException as exc:
        raise SlaJobError(f"the SLA query failed: {exc}") from exc
    finally:
        halt.set()
        for query in running:
            if query.query.isActive:
                query.query.stop()
        kafka.close()
        spark.stop()
    return RunSummary(
        tuple(tracker.input_batches),
        windows.windows,
        time.monotonic() - started,
        late.rows if late is not None else 0,
    )
