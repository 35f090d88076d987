"""Spark Structured Streaming SLA job: windowed latency percentiles and ratios per pair.

Pipeline: Kafka source on ``translate.results`` → parse with an explicit
schema (:data:`pipeline.sla.RESULT_FIELDS`, the TranslationResult fields the
job needs; records that are not JSON or lack a field are skipped) → event
time = ``completed_at`` → ``withWatermark`` → ``window(event_time, size[, slide])``
× pair → figures → append mode → ``foreachBatch`` to the sinks.

Figures per pair and window (over every result, whatever its status):

- ``count``;
- ``p50_ms``/``p95_ms``/``p99_ms``: ``percentile_approx(latency_ms,
  array(0.5, 0.95, 0.99), accuracy)`` with ``accuracy`` =
  ``settings.sla.percentile_accuracy`` (default 10 000). Spark keeps a
  Greenwald-Khanna summary with relative error ε = 1/accuracy: the value
  returned for p is a latency of the window whose rank (1-based, in sorted
  order) is at most ε·count ranks from ⌈p·count⌉, i.e. numpy's
  ``quantile(..., method="inverted_cdf")`` give or take ⌊count/accuracy⌋
  ranks. For windows of fewer than ``accuracy`` results that is zero ranks:
  the figure is exactly the inverted-CDF percentile (not numpy's default
  linear interpolation);
- ``timeout_ratio``: results with ``status == "timeout"`` or ``latency_ms``
  above the pair's threshold (``settings.sla.thresholds_ms``, default
  ``default_threshold_ms`` = 5000), over ``count``;
- ``error_ratio``: ``status == "error"`` over ``count``;
- ``cache_hit_ratio``: ``cache`` in l1 / l2 / window over ``count``.

Event time and lateness: Spark's watermark is the largest ``completed_at``
seen so far, over all pairs, minus the lateness (``watermark_s``), updated at
the end of each micro-batch. A window is emitted once, in the micro-batch
after the watermark passes its end (append mode, so possibly one trigger
later than the exact moment). A result is dropped from every window that
already ended by the watermark its micro-batch started with, and counted in
every window still open, even when the result itself is older than the
watermark (with sliding windows it can be both). The watermark only moves when newer
results arrive: the newest ``lateness + window`` of event time stays open
until they do, and stopping the job (``--until-idle`` included) never
force-emits it, because a restarted job would then emit it a second time.
The open windows live in the checkpoint and are emitted by a later run once
newer results arrive; back-fills and tests that need the tail close it by
sending a later result (the integration test sends one "tick" per pair far
in the future).

Duplicates: the pipeline delivers results at least once; a result delivered
twice is counted twice (the job does not de-duplicate by ``request_id``).

Delivery: Spark commits a micro-batch to the checkpoint after ``foreachBatch``
returns, and re-runs an uncommitted one with the same id and rows after a
restart. Each sink records the last batch it wrote (:class:`pipeline.sla.BatchLog`
under ``<checkpoint>/sinks/``) and skips batches it already wrote; Parquet
files are named by batch id and content, so a rewrite replaces the same file.
The one gap left is a crash between a Kafka flush and its log update, which
re-sends that batch's windows (at-least-once, like Spark's own Kafka sink).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
from kafka import KafkaProducer
from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pipeline.kafka_clients import kafka_python_options, spark_kafka_options
from pipeline.messages import SlaWindow
from pipeline.settings import KafkaSettings, Settings, SlaSettings
from pipeline.sla import (
    CACHE_HITS,
    PERCENTILES,
    BatchLog,
    ProgressTracker,
    RunSummary,
    SlaJobError,
    checkpoint_batches,
    describe,
    result_schema_ddl,
    spark_interval,
    to_sla_window,
)
from pipeline.stack.jars import spark_kafka_jars

log = logging.getLogger(__name__)

_POLL_S = 0.5
_STOP_GRACE_S = 30.0
_SEND_TIMEOUT_S = 30.0


def build_session(settings: Settings) -> SparkSession:
    """A local Spark session with the Kafka connector jars Maven fetched."""
    sla = settings.sla
    jars = spark_kafka_jars(settings, log.info)
    spark = (
        SparkSession.builder.master(sla.master)
        .appName("babelstream-sla")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.driver.memory", sla.driver_memory)
        .config("spark.sql.shuffle.partitions", str(sla.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def read_results(spark: SparkSession, sla: SlaSettings, kafka: KafkaSettings) -> DataFrame:
    """Parsed results from the source topic, with ``event_time`` from ``completed_at``."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(kafka))
        .option("subscribe", sla.source_topic)
        .option("startingOffsets", sla.starting_offsets)
        # results that aged out while the job was down are gone: go on without them
        .option("failOnDataLoss", "false")
    )
    if sla.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(sla.max_offsets_per_trigger))
    parsed = reader.load().select(
        F.from_json(F.col("value").cast("string"), result_schema_ddl()).alias("r")
    ).select("r.*")
    required = ("pair", "status", "completed_at", "latency_ms")
    complete = parsed.where(" AND ".join(f"{name} IS NOT NULL" for name in required))
    return complete.withColumn("event_time", F.timestamp_millis("completed_at"))


def threshold_ms(sla: SlaSettings) -> Column:
    """Each row's SLA latency threshold: its pair's, else the default."""
    column = F.lit(sla.default_threshold_ms)
    for pair_id, ms in sorted(sla.thresholds_ms.items()):
        column = F.when(F.col("pair") == pair_id, F.lit(ms)).otherwise(column)
    return column


def _occurrences(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def sla_windows(results: DataFrame, sla: SlaSettings) -> DataFrame:
    """Watermarked window × pair aggregation; one row per finished window."""
    slide = spark_interval(sla.slide_s) if sla.slide_s is not None else None
    window = F.window("event_time", spark_interval(sla.window_s), slide)
    timed_out = (F.col("status") == "timeout") | (F.col("latency_ms") > threshold_ms(sla))
    figures = (
        results.withWatermark("event_time", spark_interval(sla.watermark_s))
        .groupBy(window.alias("window"), F.col("pair"))
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.percentile_approx(
                "latency_ms", list(PERCENTILES), sla.percentile_accuracy
            ).alias("percentiles"),
            _occurrences(timed_out).alias("timeouts"),
            _occurrences(F.col("status") == "error").alias("errors"),
            _occurrences(F.col("cache").isin(*CACHE_HITS)).alias("cache_hits"),
        )
    )
    return figures.select(
        "pair",
        F.unix_millis("window.start").alias("window_start"),
        F.unix_millis("window.end").alias("window_end"),
        "count",
        "percentiles",
        (F.col("timeouts") / F.col("count")).alias("timeout_ratio"),
        (F.col("errors") / F.col("count")).alias("error_ratio"),
        (F.col("cache_hits") / F.col("count")).alias("cache_hit_ratio"),
    )


class WindowSinks:
    """The ``foreachBatch`` target: writes each batch's finished windows to every sink."""

    def __init__(self, settings: Settings) -> None:
        sla = settings.sla
        self._sla = sla
        self._kafka = settings.kafka
        self._logs = {sink: BatchLog(sla.checkpoint_dir / "sinks" / sink) for sink in sla.sinks}
        self._writers: dict[str, Callable[[list[SlaWindow], int], None]] = {
            "kafka": self._to_kafka, "parquet": self._to_parquet, "console": self._to_console,
        }
        self._producer: KafkaProducer | None = None
        self.windows = 0

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        windows = sorted(
            (to_sla_window(row.asDict(recursive=True)) for row in batch.collect()),
            key=lambda w: (w.window_start, w.pair),
        )
        if not windows:
            return
        pending = [sink for sink, batch_log in self._logs.items() if not batch_log.done(batch_id)]
        for sink in pending:
            self._writers[sink](windows, batch_id)
            self._logs[sink].mark(batch_id)
        if pending:
            self.windows += len(windows)
        log.info("batch %d: %d windows -> %s (already written: %s)", batch_id, len(windows),
                 ",".join(pending) or "-", ",".join(sorted(set(self._logs) - set(pending))) or "-")

    def _to_kafka(self, windows: list[SlaWindow], _batch_id: int) -> None:
        if self._producer is None:
            self._producer = KafkaProducer(**kafka_python_options(self._kafka, "sla"),
                                           acks="all", linger_ms=5)
        futures = [self._producer.send(self._sla.sink_topic, key=w.pair.encode(),
                                       value=w.to_json()) for w in windows]
        self._producer.flush()
        for future in futures:
            future.get(timeout=_SEND_TIMEOUT_S)

    def _to_parquet(self, windows: list[SlaWindow], batch_id: int) -> None:
        table = pa.Table.from_pylist([w.model_dump() for w in windows])
        digest = hashlib.blake2b(b"".join(w.to_json() for w in windows), digest_size=8)
        history = self._sla.history_dir
        history.mkdir(parents=True, exist_ok=True)
        path = history / f"sla-{batch_id:010d}-{digest.hexdigest()}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)

    def _to_console(self, windows: list[SlaWindow], _batch_id: int) -> None:
        for window in windows:
            print(describe(window), flush=True)

    def close(self) -> None:
        """Flush and close the Kafka producer, if one was opened."""
        if self._producer is not None:
            self._producer.close()


def start_query(spark: SparkSession, settings: Settings, sinks: WindowSinks) -> StreamingQuery:
    """Start the checkpointed streaming query writing to ``sinks``."""
    sla = settings.sla
    windows = sla_windows(read_results(spark, sla, settings.kafka), sla)
    return (
        windows.writeStream.outputMode("append")
        .foreachBatch(sinks)
        .option("checkpointLocation", str(sla.checkpoint_dir))
        .trigger(processingTime=spark_interval(sla.trigger_s))
        .queryName("babelstream_sla")
        .start()
    )


def _observe(query: StreamingQuery, tracker: ProgressTracker) -> None:
    for report in tracker.observe(query.recentProgress):
        log.info("batch %s: %s input rows in %s ms, watermark %s", report["batchId"],
                 report.get("numInputRows"),
                 (report.get("durationMs") or {}).get("triggerExecution"),
                 (report.get("eventTime") or {}).get("watermark"))


def supervise(query: StreamingQuery, tracker: ProgressTracker, stop: threading.Event) -> None:
    """Follow the query until it fails, ``stop`` is set, or ``tracker`` says it is idle.

    The query is stopped between micro-batches, or after ``_STOP_GRACE_S``
    if batches run back to back; a batch interrupted that way is re-run on
    restart, and the sinks skip what they already wrote.
    """
    stopping_since: float | None = None
    while query.isActive:
        query.awaitTermination(_POLL_S)
        _observe(query, tracker)
        if stopping_since is None and (stop.is_set() or tracker.idle()):
            stopping_since = time.monotonic()
        if stopping_since is not None and (
                not query.status["isTriggerActive"]
                or time.monotonic() - stopping_since > _STOP_GRACE_S):
            query.stop()
    _observe(query, tracker)


def _run_resuming(spark: SparkSession, settings: Settings, sinks: WindowSinks,
                  tracker: ProgressTracker, stop: threading.Event) -> None:
    """Run the query; start it once more if it died of SPARK-55271 after a re-run batch.

    Spark 4.1's Kafka source fails progress reporting (NullPointerException in
    ``KafkaMicroBatchStream.metrics``, apache/spark#55236) after re-running an
    uncommitted batch on start, because it never asked Kafka for the latest
    offsets. The batch is committed by then, so starting again resumes cleanly.
    """
    checkpoint = settings.sla.checkpoint_dir
    planned, committed = checkpoint_batches(checkpoint)
    try:
        supervise(start_query(spark, settings, sinks), tracker, stop)
    except StreamingQueryException:
        if planned <= committed or checkpoint_batches(checkpoint)[1] < planned:
            raise
        log.warning("the query failed after re-running batch %d (SPARK-55271); starting it "
                    "again", planned)
        supervise(start_query(spark, settings, sinks), tracker, stop)


def run(settings: Settings, until_idle_s: float | None = None,
        stop: threading.Event | None = None,
        on_input: Callable[[int], object] | None = None) -> RunSummary:
    """Run the SLA job until ``stop`` is set or, with ``until_idle_s``, input stops.

    Raises :class:`~pipeline.sla.SlaJobError` when the query fails (the
    checkpoint keeps what it committed; a rerun resumes there).

    ``until_idle_s`` counts from the query's start, then from the last
    micro-batch with input; make it a few triggers long, so that the batch
    emitting the windows the last input closed runs before the stop (if it
    does not, the next run emits them). ``on_input`` gets the input rows of
    each micro-batch that had some.
    """
    started = time.monotonic()
    spark = build_session(settings)
    sinks = WindowSinks(settings)
    tracker = ProgressTracker(until_idle_s, on_input=on_input)
    try:
        _run_resuming(spark, settings, sinks, tracker, stop or threading.Event())
    except StreamingQueryException as exc:
        raise SlaJobError(f"the SLA query failed: {exc}") from exc
    finally:
        sinks.close()
        spark.stop()
    return RunSummary(tuple(tracker.input_batches), sinks.windows, time.monotonic() - started)
