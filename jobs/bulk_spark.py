"""Bulk jobs on Spark, for corpora larger than one machine.

Two batch jobs, run with ``babelstream bulk spark-submit`` and
``babelstream bulk spark-assemble`` (or by calling :func:`submit` and
:func:`assemble` with a session of your own):

``submit``
    Parquet (file or dataset) → each document segmented with the CLI's
    segmenter (:func:`pipeline.bulk.segmenter.segment_document`, in a
    Python UDF) → the *plan* (the input columns plus segments, saved as
    Parquet under ``<bulk.state_dir>/<job>/spark-plan``) → one request per
    segment, keyed by content digest, with the CLI's deterministic request ids
    → minus segments that already have an ``ok`` result on
    ``translate.results`` → Spark's Kafka sink on ``translate.work-bulk.<model>``.
    Running it again therefore publishes only what is missing; requests
    carry the contract's longest deadline (one hour), so feed corpora that
    take longer than that to translate in waves (``max_segments``).

``assemble``
    Batch read of ``translate.results`` (earliest to latest) → this job's
    results, one per segment (an ``ok`` one when there is one) → joined to
    the plan by document → each document put back together with the CLI's
    assembler → Parquet with the input columns plus ``translation``,
    ``status`` and ``errors`` (:mod:`pipeline.bulk.schema`), in input order
    (file path, then row), in ``files`` part files of contiguous ranges.

Input order is (file path, row index in the file). Without an id column a
document's id is ``<file name>:<row index>``. Results must still be on the
results topic when ``assemble`` runs (mind its retention).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

from jobs.session import spark_session
from pipeline.bulk import BulkInputError
from pipeline.bulk.assemble import SegmentOutcome, assemble_document
from pipeline.bulk.readers import DEFAULT_ID_COLUMN
from pipeline.bulk.requests import RequestTemplate, job_identity, wire_doc_id
from pipeline.bulk.runner import model_id_for
from pipeline.bulk.schema import OUTPUT_COLUMNS, OUTPUT_FIELDS
from pipeline.bulk.segmenter import Segment, Segmentation, segment_for_format
from pipeline.bulk.state import JobState
from pipeline.contract.messages import now_ms
from pipeline.contract.pairs import RESULTS_TOPIC, Pair, bulk_work_topic
from pipeline.kafka.clients import spark_kafka_options, spark_kafka_source_options
from pipeline.settings import Settings

log = logging.getLogger(__name__)

PREFIX = "_bs_"
FILE, ROW, DOC_ID = f"{PREFIX}file", f"{PREFIX}row", f"{PREFIX}doc_id"
PLAN, RESULTS = f"{PREFIX}plan", f"{PREFIX}results"
# What submit adds to each document: its wire doc id, segments and tail.
PLAN_TYPE = pa.struct(
    [
        ("wire_id", pa.string()),
        ("segments", pa.list_(pa.struct([("lead", pa.string()), ("text", pa.string())]))),
        ("tail", pa.string()),
    ]
)
REQUEST_TYPE = pa.struct(
    [("request_id", pa.string()), ("key", pa.binary()), ("value", pa.binary())]
)
RESULT_DDL = (
    "request_id STRING, status STRING, translation STRING, error STRING, job_id STRING, "
    "doc_id STRING, segment_index INT"
)


def bulk_session(settings: Settings, app_name: str, master: str | None = None) -> SparkSession:
    """The bulk jobs' Spark session (``bulk.spark_master`` unless ``master`` is given)."""
    bulk = settings.bulk
    return spark_session(
        settings,
        app_name,
        master=master or bulk.spark_master,
        driver_memory=bulk.spark_driver_memory,
        shuffle_partitions=bulk.spark_shuffle_partitions,
    )


def plan_path(settings: Settings, job_id: str) -> Path:
    """Where ``submit`` keeps a job's plan for ``assemble``."""
    return settings.bulk.state_dir / job_id / "spark-plan"


def read_documents(
    spark: SparkSession, input_path: str, id_column: str | None, text_column: str
) -> DataFrame:
    """The input with its order (file, row) and each document's id as a string."""
    docs = spark.read.parquet(input_path)
    clash = [c for c in docs.columns if c.startswith(PREFIX) or c in OUTPUT_COLUMNS]
    if clash:
        raise BulkInputError(f"the input has reserved column name(s): {', '.join(clash)}")
    if text_column not in docs.columns:
        raise BulkInputError(f"no text column {text_column!r} (columns: {', '.join(docs.columns)})")
    if id_column is None and DEFAULT_ID_COLUMN in docs.columns:
        id_column = DEFAULT_ID_COLUMN
    if id_column is not None and id_column not in docs.columns:
        raise BulkInputError(f"no id column {id_column!r} (columns: {', '.join(docs.columns)})")
    doc_id = (
        F.col(id_column).cast("string")
        if id_column is not None
        else F.concat(
            F.element_at(F.split("_metadata.file_path", "/"), -1),
            F.lit(":"),
            F.col("_metadata.row_index").cast("string"),
        )
    )
    return docs.select(
        "*",
        F.col("_metadata.file_path").alias(FILE),
        F.col("_metadata.row_index").alias(ROW),
        doc_id.alias(DOC_ID),
    )


def _udf(function: Any, arrow_type: pa.DataType) -> Any:
    """A row-at-a-time Python UDF (Spark's Arrow UDFs need pandas, which we do not ship)."""
    return F.udf(function, from_arrow_type(arrow_type), useArrow=False)


def _plan_document(max_bytes: int, text_format: str) -> Any:
    def plan(doc_id: str, text: str | None) -> dict[str, Any]:
        if text is None:
            return {"wire_id": wire_doc_id(doc_id), "segments": None, "tail": None}
        seg = segment_for_format(text, text_format, max_bytes)
        return {
            "wire_id": wire_doc_id(doc_id),
            "tail": seg.tail,
            "segments": [{"lead": s.lead, "text": s.text} for s in seg.segments],
        }

    return _udf(plan, PLAN_TYPE)


def _segment_request(template: RequestTemplate) -> Any:
    def request(doc_id: str, segment_index: int, text: str) -> dict[str, Any]:
        built = template.request(doc_id, segment_index, text, now_ms())
        key, value = template.record(built)
        return {"request_id": built.request_id, "key": key, "value": value}

    # submitted_at is the time of the call: never re-evaluate or reorder it
    return _udf(request, REQUEST_TYPE).asNondeterministic()


def _assemble_document(
    segments: list[Any] | None, tail: str | None, results: list[Any] | None
) -> dict[str, Any]:
    if segments is None:
        doc = assemble_document(None, [])
    else:
        outcomes: list[SegmentOutcome | None] = [None] * len(segments)
        for r in results or []:
            if 0 <= r["segment_index"] < len(outcomes):
                outcomes[r["segment_index"]] = SegmentOutcome(
                    r["status"], r["translation"], r["error"]
                )
        segmentation = Segmentation(
            tuple(Segment(s["lead"], s["text"]) for s in segments), tail or ""
        )
        doc = assemble_document(segmentation, outcomes)
    return {"translation": doc.translation, "status": doc.status, "errors": doc.errors}


def _output_column() -> Column:
    column: Column = _udf(_assemble_document, pa.struct(list(OUTPUT_FIELDS)))(
        F.col(f"{PLAN}.segments"), F.col(f"{PLAN}.tail"), F.col(RESULTS)
    )
    return column


def job_results(spark: SparkSession, settings: Settings, job_id: str, topic: str) -> DataFrame:
    """This job's results on ``topic`` (batch read, earliest to latest)."""
    raw = (
        spark.read.format("kafka")
        .options(**spark_kafka_source_options(settings.kafka))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
        .load()
    )
    text = F.col("value").cast("string")
    return (
        raw.where(text.contains(job_id))
        .select(F.from_json(text, RESULT_DDL).alias("r"))
        .select("r.*")
        .where(F.col("job_id") == job_id)
    )


def submit(
    spark: SparkSession,
    settings: Settings,
    *,
    input_path: str,
    pair: Pair,
    job_id: str,
    id_column: str | None = None,
    text_column: str = "text",
    tenant: str | None = None,
    domain: str | None = None,
    topic: str | None = None,
    max_segments: int | None = None,
    text_format: str = "text",
    glossary: str | None = None,
) -> dict[str, Any]:
    """Plan the job and publish the requests of its segments without an ok result.

    Markup documents (``text_format`` html, xml, markdown) are one segment each.
    """
    model_id = model_id_for(settings, pair)
    template = RequestTemplate(
        job_id=job_id,
        pair=pair,
        model_id=model_id,
        timeout_ms=settings.bulk.timeout_ms,
        tenant=tenant,
        domain=domain,
        text_format=text_format,
        glossary=glossary,
    )
    topic = topic or bulk_work_topic(model_id)
    state = JobState(settings.bulk.state_dir, job_id)
    plan_dir = plan_path(settings, job_id)
    state.start(
        job_identity(pair, tenant, domain, text_format, glossary),
        engine="spark",
        inputs=[input_path],
        id_column=id_column,
        text_column=text_column,
        plan=str(plan_dir),
    )
    docs = read_documents(spark, input_path, id_column, text_column)
    planned = docs.withColumn(
        PLAN,
        _plan_document(settings.limits.max_text_bytes, text_format)(
            F.col(DOC_ID), F.col(text_column)
        ),
    )
    planned.write.mode("overwrite").parquet(str(plan_dir))
    plan = spark.read.parquet(str(plan_dir))
    segments = plan.select(
        FILE, ROW, DOC_ID, F.posexplode(f"{PLAN}.segments").alias("segment_index", "segment")
    )
    requests = segments.select(
        FILE,
        ROW,
        "segment_index",
        _segment_request(template)(
            F.col(DOC_ID), F.col("segment_index").cast("int"), F.col("segment.text")
        ).alias("r"),
    ).select(FILE, ROW, "segment_index", "r.*")
    done = (
        job_results(spark, settings, job_id, RESULTS_TOPIC)
        .where(F.col("status") == "ok")
        .select("request_id")
        .distinct()
    )
    pending = requests.join(done, "request_id", "left_anti")
    if max_segments is not None:
        pending = pending.orderBy(FILE, ROW, "segment_index").limit(max_segments)
    pending = pending.select("key", "value").persist()
    try:
        published = pending.count()
        (
            pending.write.format("kafka")
            .options(**spark_kafka_options(settings.kafka))
            .option("kafka.acks", "all")
            .option("topic", topic)
            .save()
        )
    finally:
        pending.unpersist()
    documents = plan.count()
    segments_total = segments.count()
    report = {
        "job_id": job_id,
        "documents": documents,
        "segments_total": segments_total,
        "published": published,
        "topic": topic,
        "plan": str(plan_dir),
    }
    state.update(
        state="submitted",
        pid=None,
        documents=documents,
        segments_total=segments_total,
        last_submit=report,
    )
    return report


def assemble(
    spark: SparkSession,
    settings: Settings,
    *,
    job_id: str,
    output: str,
    results_topic: str | None = None,
    files: int = 1,
) -> dict[str, Any]:
    """Write the job's output Parquet from its plan and the results topic."""
    plan_dir = plan_path(settings, job_id)
    if not plan_dir.is_dir():
        raise BulkInputError(
            f"no Spark plan for job {job_id} at {plan_dir}; run spark-submit first"
        )
    plan = spark.read.parquet(str(plan_dir))
    ok_first = F.when(F.col("status") == "ok", 1).otherwise(0)
    per_segment = (
        job_results(spark, settings, job_id, results_topic or RESULTS_TOPIC)
        .groupBy("doc_id", "segment_index")
        .agg(F.max_by(F.struct("status", "translation", "error"), ok_first).alias("r"))
    )
    per_doc = per_segment.groupBy(F.col("doc_id").alias(f"{PREFIX}rdoc")).agg(
        F.collect_list(F.struct("segment_index", "r.status", "r.translation", "r.error")).alias(
            RESULTS
        )
    )
    joined = plan.join(per_doc, plan[f"{PLAN}.wire_id"] == per_doc[f"{PREFIX}rdoc"], "left")
    original = [c for c in plan.columns if not c.startswith(PREFIX)]
    out = joined.select(*original, FILE, ROW, _output_column().alias("out"))
    (
        out.repartitionByRange(files, FILE, ROW)
        .sortWithinPartitions(FILE, ROW)
        .select(*original, *(F.col(f"out.{name}").alias(name) for name in OUTPUT_COLUMNS))
        .write.mode("overwrite")
        .parquet(output)
    )
    rows = (
        spark.read.parquet(output)
        .groupBy("status")
        .agg(F.count("*").alias("documents"), F.sum(F.size("errors")).alias("failed"))
        .collect()
    )
    counts = {row["status"]: row["documents"] for row in rows}
    report = {
        "job_id": job_id,
        "output": output,
        "doc_statuses": counts,
        "documents": sum(counts.values()),
        "segments_failed": sum(row["failed"] or 0 for row in rows),
    }
    JobState(settings.bulk.state_dir, job_id).update(
        state="done" if set(counts) <= {"ok"} else "assembled-with-errors",
        output=output,
        last_assembly=report,
    )
    return report
