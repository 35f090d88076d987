"""Spark bulk jobs on the real stack: Kafka sink out, batch results in, the CLI's layout.

No worker needed: the test plays the worker, answering the requests the
submit job published (read back from a fresh topic) on a fresh results topic.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from pipeline.bulk.assemble import SegmentOutcome, assemble_table
from pipeline.contract.messages import TranslationRequest, TranslationResult
from pipeline.contract.pairs import Pair
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import Settings, load_settings
from tests.integration.helpers import TopicTail, plan_corpus

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

# Spark's Python workers must run this interpreter (pyarrow, this package).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

pytestmark = pytest.mark.integration

PAIR = Pair("en", "en-XA")
TEXTS = [
    "First doc. It has two sentences.",
    "",
    None,
    "Paragraph one.\r\n\r\nParagraph two with emoji 😀! FAIL this one.",
    "日本語の文です。次の文。",
    "  leading and trailing space.  ",
]


def _normalized(t: pa.DataType) -> str:
    """A type's shape without nullability or list item names (Spark and pyarrow differ)."""
    if pa.types.is_list(t):
        return f"list<{_normalized(t.value_type)}>"
    if pa.types.is_struct(t):
        return (
            "struct<"
            + ",".join(
                f"{t.field(i).name}:{_normalized(t.field(i).type)}" for i in range(t.num_fields)
            )
            + ">"
        )
    return str(t).replace("large_", "")


def test_spark_submit_and_assemble_match_the_cli(
    spark: SparkSession, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    from jobs import bulk_spark

    base = load_settings()
    settings: Settings = base.model_copy(
        update={"bulk": base.bulk.model_copy(update={"state_dir": tmp_path / "state"})}
    )
    job_id = f"spark-test-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "in"
    source.mkdir()
    table = pa.table(
        {"id": [f"doc-{i}" for i in range(len(TEXTS))], "text": TEXTS, "n": list(range(len(TEXTS)))}
    )
    pq.write_table(table.slice(0, 3), source / "part-0.parquet")
    pq.write_table(table.slice(3), source / "part-1.parquet")

    requests_topic, results_topic = new_topic(1), new_topic(1)
    tail = TopicTail(settings.kafka.bootstrap_servers, requests_topic)
    report = bulk_spark.submit(
        spark, settings, input_path=str(source), pair=PAIR, job_id=job_id, topic=requests_topic
    )
    plans = plan_corpus(job_id, [source], settings.limits.max_text_bytes)
    tasks = [task for plan in plans for task in plan.tasks]
    assert report["segments_total"] == report["published"] == len(tasks)
    assert report["documents"] == len(TEXTS)

    records = tail.read_until(lambda rs: len(rs) >= len(tasks), 60)
    requests = [TranslationRequest.from_json(r.value) for r in records]
    assert sorted(r.request_id for r in requests) == sorted(t.request_id for t in tasks)

    # Play the worker: upper-case translations, an error for the FAIL sentence.
    producer = KafkaProducer(**kafka_python_options(settings.kafka, "tests"))
    outcomes: dict[str, SegmentOutcome] = {}
    for request in requests:
        failed = "FAIL" in request.text
        result = TranslationResult.for_request(
            request,
            status="error" if failed else "ok",
            translation=None if failed else request.text.upper(),
            error="boom" if failed else None,
            cache="miss",
        )
        outcomes[request.request_id] = SegmentOutcome(
            result.status, result.translation, result.error
        )
        producer.send(results_topic, key=request.request_id.encode(), value=result.to_json())
    producer.flush()
    producer.close()

    output = tmp_path / "out"
    summary = bulk_spark.assemble(
        spark, settings, job_id=job_id, output=str(output), results_topic=results_topic
    )
    assert summary["doc_statuses"] == {"ok": 5, "partial": 1}

    spark_out = pq.read_table(output)
    for plan in plans:
        plan.outcomes.update({t.request_id: outcomes[t.request_id] for t in plan.tasks})
    cli_out = pa.Table.from_batches([assemble_table(plan.rows, plan.assemble()) for plan in plans])
    assert spark_out.column_names == cli_out.column_names
    assert [_normalized(f.type) for f in spark_out.schema] == [
        _normalized(f.type) for f in cli_out.schema
    ]
    assert spark_out.to_pylist() == cli_out.to_pylist()
    assert spark_out.column("translation").to_pylist()[0] == "FIRST DOC. IT HAS TWO SENTENCES."

    # Submitting again publishes only segments without an ok result on translate.results
    # (none here: the test's results went to a private topic).
    again = bulk_spark.submit(
        spark,
        settings,
        input_path=str(source),
        pair=PAIR,
        job_id=job_id,
        topic=requests_topic,
        max_segments=2,
    )
    assert again["published"] == 2
