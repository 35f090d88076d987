"""The SLA job's plan on real Spark: one source scan, one shuffle that every branch reads.

Spark reuses an exchange only for identical subtrees, so a column one branch
stops reading splits the shuffle and gives that branch a source scan of its
own (the Kafka read and the JSON parse again, per micro-batch). The job's
branches read the same columns on purpose (:func:`jobs.sla.stamped_rows`);
this test fails when a change makes them differ.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jobs.sla import job_output
from pipeline.settings import load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# read_stream()'s output, as a file source gives it
ROWS_DDL = (
    "is_result boolean, request_id string, series string, priority string, status string, "
    "cache string, latency_ms long, event_time timestamp"
)


def _executed_plan(
    spark: SparkSession, rows: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> str:
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
    capsys.readouterr()
    query.explain()  # the last micro-batch's executed plan
    return capsys.readouterr().out


def test_one_scan_and_one_shuffle_for_every_branch(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows"
    rows.mkdir()
    records = [
        {
            "is_result": True,
            "request_id": f"r{i % 40}",  # repeats, as at-least-once delivery makes them
            "series": "en_de",
            "priority": "interactive",
            "status": "ok",
            "cache": "miss",
            "latency_ms": 100 + i,
            "event_time": f"2026-01-01T00:00:{i % 60:02d}Z",
        }
        for i in range(50)
    ]
    (rows / "part.json").write_text("\n".join(json.dumps(r) for r in records))

    plan = _executed_plan(spark, rows, tmp_path / "checkpoint", capsys)

    lines = plan.splitlines()
    # the source's node: FileScan json here, LocalTableScan <empty> in a batch without input
    assert sum(re.search(r"\w*Scan\b", line) is not None for line in lines) == 1, plan
    shuffles = [line for line in lines if "Exchange hashpartitioning(request_id" in line]
    assert sum("ReusedExchange" not in line for line in shuffles) == 1, plan
    assert sum("ReusedExchange" in line for line in shuffles) == 2, plan  # dedup, late rows
