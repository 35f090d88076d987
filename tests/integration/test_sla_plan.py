"""The SLA job's plan on real Spark: one source scan, one shuffle that every branch reads,
and a de-duplication whose state the watermark evicts.

Spark reuses an exchange only for identical subtrees, so a column one branch
stops reading splits the shuffle and gives that branch a source scan of its
own (the Kafka read and the JSON parse again, per micro-batch). The job's
branches read the same columns on purpose (:func:`jobs.sla.stamped_rows`);
this test fails when a change makes them differ.

Spark's watermark propagation does not look through a ``ReusedExchange``: a
stateful operator reading one gets watermark 0, so the dedup must read the
exchange itself (:func:`jobs.sla._counted_rows`). When it did not, its state
kept every request id the job had ever seen.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafka import KafkaProducer

from jobs.sla import job_output, read_stream
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.stack.manager import Endpoints

# read_stream()'s output, as a file source gives it
ROWS_DDL = (
    "is_result boolean, request_id string, series string, priority string, status string, "
    "cache string, latency_ms long, event_time timestamp"
)


def _run(spark: SparkSession, rows: Path, checkpoint: Path) -> StreamingQuery:
    """The job's query over the JSON files in ``rows``, to the end."""
    stream = spark.readStream.schema(ROWS_DDL).json(str(rows))
    output = job_output(stream, load_settings().sla, late_rows=True)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # one partition plans no hash shuffle
    try:
        query = (
            output.writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    return query


def _executed_plan(
    spark: SparkSession, rows: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> str:
    query = _run(spark, rows, checkpoint)
    capsys.readouterr()
    query.explain()  # the last micro-batch's executed plan
    return capsys.readouterr().out


def _record(request_id: str, event_time: str) -> dict[str, object]:
    return {
        "is_result": True,
        "request_id": request_id,
        "series": "en_de",
        "priority": "interactive",
        "status": "ok",
        "cache": "miss",
        "latency_ms": 100,
        "event_time": event_time,
    }


def test_one_scan_and_one_shuffle_for_every_branch(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows"
    rows.mkdir()
    # repeats, as at-least-once delivery makes them
    records = [_record(f"r{i % 40}", f"2026-01-01T00:00:{i % 60:02d}Z") for i in range(50)]
    (rows / "part.json").write_text("\n".join(json.dumps(r) for r in records))

    plan = _executed_plan(spark, rows, tmp_path / "checkpoint", capsys)

    lines = plan.splitlines()
    # the source's node: FileScan json here, LocalTableScan <empty> in a batch without input
    assert sum(re.search(r"\w*Scan\b", line) is not None for line in lines) == 1, plan
    shuffles = [line for line in lines if "Exchange hashpartitioning(request_id" in line]
    assert sum("ReusedExchange" not in line for line in shuffles) == 1, plan
    assert sum("ReusedExchange" in line for line in shuffles) == 2, plan  # received, late rows
    # the dedup reads the exchange itself: the line below its own is the shuffle, not a reuse
    dedup = next(i for i, line in enumerate(lines) if "StreamingDeduplicateWithinWatermark" in line)
    assert "Exchange hashpartitioning(request_id" in lines[dedup + 1], plan
    assert "ReusedExchange" not in lines[dedup + 1], plan


def test_the_watermark_evicts_the_dedup_state(
    spark: SparkSession, stack: Endpoints, new_topic: Callable[..., str]
) -> None:
    """Ids whose windows closed leave the dedup state in the next micro-batch with input.

    Read from Kafka through the job's own source, as in production. A busy job
    runs no micro-batch without input (Spark runs one to evict only when a
    trigger finds nothing new), so eviction must happen in batches that carry
    rows, as in the third one here.
    """
    settings = stack.settings
    results, ticks = new_topic(1), new_topic(1)
    per_batch = 40
    # 2026-01-01; the second batch ten minutes later: the watermark passes every window
    # of the first and its lateness
    starts_ms = (1_767_225_600_000, 1_767_226_200_000, 1_767_226_220_000)
    producer = KafkaProducer(**kafka_python_options(settings.kafka, "tests"), acks="all")
    for batch, start_ms in enumerate(starts_ms):
        for i in range(per_batch):
            request_id = f"b{batch}-{i}"
            document = {
                "request_id": request_id,
                "pair": "en_de",
                "status": "ok",
                "cache": "miss",
                "completed_at": start_ms + 100 * i,
                "latency_ms": 100,
            }
            producer.send(results, key=request_id.encode(), value=json.dumps(document).encode())
    producer.flush()
    producer.close()
    sla = settings.sla.model_copy(
        update={
            "source_topic": results,
            "ticks_topic": ticks,
            "starting_offsets": "earliest",
            "max_offsets_per_trigger": per_batch,
        }
    )
    job_settings = settings.model_copy(update={"sla": sla})
    output = job_output(read_stream(spark, job_settings), sla, late_rows=True)
    with tempfile.TemporaryDirectory(prefix="sla-evict-") as checkpoint:
        query = (
            output.writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    reports = {report["batchId"]: report for report in query.recentProgress}
    # Spark counts the rows of every scan of the source: one scan per micro-batch
    assert [reports[batch]["numInputRows"] for batch in range(3)] == [per_batch] * 3, reports
    by_batch = {
        batch: operator
        for batch, report in reports.items()
        for operator in report["stateOperators"]
        if operator["operatorName"] == "dedupeWithinWatermark"
    }
    assert by_batch[1]["numRowsTotal"] == 2 * per_batch, by_batch
    # batch 1 moved the watermark; batch 2, with rows of its own, evicts by it
    assert by_batch[2]["numRowsRemoved"] == per_batch, by_batch
    assert by_batch[2]["numRowsTotal"] == 2 * per_batch, by_batch
