"""``babelstream bulk run | status | spark-submit | spark-assemble``: whole corpora."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pipeline.bulk import BulkCancelled, BulkInputError
from pipeline.bulk.readers import FORMATS, CorpusReader
from pipeline.bulk.requests import check_job_id, default_job_id
from pipeline.bulk.runner import JobSpec, model_id_for, run_job
from pipeline.bulk.state import JobState, Progress, process_alive
from pipeline.cli.commands.options import DOMAIN_HELP, LABEL, LANGUAGE, TENANT_HELP
from pipeline.contract.pairs import Pair
from pipeline.control.cancels import cancels_for, publish_cancels
from pipeline.fidelity.prepare import FORMATS as TEXT_FORMATS
from pipeline.kafka.reachability import require_kafka, require_spark_master
from pipeline.settings import Settings


@click.group()
def bulk() -> None:
    """Bulk document jobs: a corpus in, a translated Parquet file out (resumable)."""


def _checked_job_id(job_id: str) -> str:
    try:
        return check_job_id(job_id)
    except BulkInputError as exc:
        raise click.BadParameter(str(exc), param_hint="--job-id") from None


_text_format_option = click.option(
    "--text-format",
    type=click.Choice(TEXT_FORMATS),
    default="text",
    show_default=True,
    help="How documents are parsed: markup (html, xml, markdown) is kept and its text "
    "translated; markup documents travel whole, one request each.",
)
_glossary_option = click.option(
    "--glossary", default=None, help="A glossary of the tenant for this pair (see glossary put)."
)


def _require_spark_services(settings: Settings, master: str | None) -> None:
    require_kafka(settings.kafka)
    require_spark_master(master or settings.bulk.spark_master, settings.kafka.connect_timeout_s)


@bulk.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--src", required=True, type=LANGUAGE, help="Source language (BCP-47).")
@click.option("--tgt", required=True, type=LANGUAGE, help="Target language (BCP-47).")
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Output Parquet file.",
)
@click.option(
    "--id-column",
    default=None,
    help="Document id column [default: 'id' if present, else the row number].",
)
@click.option(
    "--text-column", default="text", show_default=True, help="Column holding each document's text."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="Input format (auto: by suffix; a folder of Parquet files is a dataset).",
)
@click.option(
    "--job-id",
    default=None,
    help="Job id [default: a digest of inputs, pair, columns, tenant and domain, "
    "so the same command resumes].",
)
@click.option("--tenant", type=LABEL, default=None, help=TENANT_HELP)
@click.option("--domain", type=LABEL, default=None, help=DOMAIN_HELP)
@_text_format_option
@_glossary_option
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    default=None,
    help="Segments published but not yet answered [default: bulk.max_in_flight].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
@click.pass_obj
def run(
    settings: Settings,
    inputs: tuple[Path, ...],
    src: str,
    tgt: str,
    output: Path,
    id_column: str | None,
    text_column: str,
    fmt: str,
    job_id: str | None,
    tenant: str | None,
    domain: str | None,
    text_format: str,
    glossary: str | None,
    max_in_flight: int | None,
    as_json: bool,
) -> None:
    """Translate every document of INPUT... (Parquet, JSONL, CSV, text files or folders)."""
    pair = Pair(src, tgt)
    model_id_for(settings, pair)  # a pair no model serves is refused before the corpus is read
    resolved = tuple(str(p.resolve()) for p in inputs)
    job_id = _checked_job_id(
        job_id
        or default_job_id(
            resolved,
            pair,
            id_column=id_column,
            text_column=text_column,
            tenant=tenant,
            domain=domain,
            text_format=text_format,
            glossary=glossary,
        )
    )
    if max_in_flight is not None:
        settings = settings.model_copy(
            update={"bulk": settings.bulk.model_copy(update={"max_in_flight": max_in_flight})}
        )
    spec = JobSpec(
        job_id=job_id,
        pair=pair,
        output=output.resolve(),
        inputs=resolved,
        fmt=fmt,
        id_column=id_column,
        text_column=text_column,
        tenant=tenant,
        domain=domain,
        text_format=text_format,
        glossary=glossary,
    )
    try:
        reader = CorpusReader(
            list(inputs),
            fmt=fmt,  # type: ignore[arg-type]  # click.Choice of InputFormat's values
            id_column=id_column,
            text_column=text_column,
        )
        click.echo(f"job {job_id}: {reader.scan().documents} documents -> {output}", err=True)
        require_kafka(settings.kafka)
        report = run_job(settings, spec, reader)
    except BulkCancelled as exc:
        raise click.ClickException(f"{exc}; rerun the same command to resume it") from None
    summary = report.as_dict()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(
            f"job {job_id}: {summary['segments_total']} segments ({summary['reused']} from "
            f"earlier runs, {summary['completed']} now, {summary['errors']} failed); "
            f"documents {summary['doc_statuses']}; wrote {output}"
        )


def job_status(settings: Settings, job_id: str) -> dict[str, Any]:
    """What ``bulk status`` reports for one job."""
    state = JobState(settings.bulk.state_dir, job_id)
    manifest = state.manifest()
    progress = state.progress()
    name = manifest.get("state")
    if name == "running" and not process_alive(manifest.get("pid"), manifest.get("host")):
        name = "interrupted"
    # a streaming run knows its segment count only at the end
    total = manifest.get("segments_total") or 0
    if manifest.get("engine") == "spark":  # results live on Kafka; counts from the last assembly
        assembly = manifest.get("last_assembly")
        failed = assembly["segments_failed"] if assembly else 0
        progress = Progress(completed=total - failed if assembly else 0, errors=failed)
    return {
        "job_id": job_id,
        "state": name,
        "pair": manifest.get("pair"),
        "documents": manifest.get("documents"),
        "segments_total": total,
        "segments_completed": progress.completed,
        "segments_errors": progress.errors,
        "segments_cancelled": progress.cancelled,
        "segments_pending": max(
            0, total - progress.completed - progress.errors - progress.cancelled
        ),
        "cancel_requested_at": manifest.get("cancel_requested_at"),
        "output": manifest.get("output"),
        "inputs": manifest.get("inputs"),
        "runs": manifest.get("runs"),
        "updated_at": manifest.get("updated_at"),
        "state_dir": str(state.path),
    }


@bulk.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def status(settings: Settings, job_id: str, as_json: bool) -> None:
    """Progress of bulk job JOB_ID (segments total / completed / errors, state, output)."""
    doc = job_status(settings, job_id)
    if as_json:
        click.echo(json.dumps(doc))
        return
    total = doc["segments_total"] or 0
    done = doc["segments_completed"]
    share = f" ({100 * done / total:.1f}%)" if total else ""
    click.echo(
        f"job       {doc['job_id']} ({doc['pair']})\n"
        f"state     {doc['state']}\n"
        f"documents {doc['documents']}\n"
        f"segments  {done}/{total or '?'} completed{share}, {doc['segments_errors']} "
        f"errors, {doc['segments_cancelled']} cancelled, "
        f"{doc['segments_pending']} pending\n"
        f"output    {doc['output']}\n"
        f"state dir {doc['state_dir']}"
    )


@bulk.command()
@click.argument("job_id")
@click.pass_obj
def cancel(settings: Settings, job_id: str) -> None:
    """Cancel bulk job JOB_ID: no segment of it not yet translated is translated.

    Workers resolve its pending segments as `cancelled` without compute, a
    running `bulk run` of it stops, and `bulk status` says `cancelled`.
    Running the same `bulk run` command again resumes the job.
    """
    job_id = _checked_job_id(job_id)
    state = JobState(settings.bulk.state_dir, job_id)
    state.cancellable()  # it must exist here (or the id is probably mistyped), unfinished
    publish_cancels(settings, cancels_for(job_ids=[job_id], requested_by="bulk cancel"))
    manifest = state.request_cancel()
    click.echo(f"job {job_id}: cancel requested (state {manifest['state']})", err=True)


@bulk.command("spark-submit")
@click.argument("input_path")
@click.option("--src", required=True, type=LANGUAGE, help="Source language (BCP-47).")
@click.option("--tgt", required=True, type=LANGUAGE, help="Target language (BCP-47).")
@click.option("--job-id", required=True, help="Job id (the same one for spark-assemble).")
@click.option(
    "--id-column",
    default=None,
    help="Document id column [default: 'id' if present, else <file>:<row>].",
)
@click.option(
    "--text-column", default="text", show_default=True, help="Column holding each document's text."
)
@click.option("--tenant", type=LABEL, default=None, help=TENANT_HELP)
@click.option("--domain", type=LABEL, default=None, help=DOMAIN_HELP)
@_text_format_option
@_glossary_option
@click.option("--topic", default=None, help="Request topic [default: translate.work-bulk.<model>].")
@click.option(
    "--max-segments",
    type=click.IntRange(min=1),
    default=None,
    help="Publish at most this many pending segments now (feed huge jobs in waves).",
)
@click.option("--master", default=None, help="Spark master [default: bulk.spark_master].")
@click.pass_obj
def spark_submit(
    settings: Settings,
    input_path: str,
    src: str,
    tgt: str,
    job_id: str,
    id_column: str | None,
    text_column: str,
    tenant: str | None,
    domain: str | None,
    text_format: str,
    glossary: str | None,
    topic: str | None,
    max_segments: int | None,
    master: str | None,
) -> None:
    """Segment a Parquet corpus on Spark and publish its requests through Spark's Kafka sink.

    Segments that already have an ok result on translate.results are skipped,
    so running it again publishes only what is missing.
    """
    from jobs import bulk_spark

    job_id = _checked_job_id(job_id)
    _require_spark_services(settings, master)
    spark = bulk_spark.bulk_session(settings, f"babelstream-bulk-submit-{job_id}", master)
    try:
        report = bulk_spark.submit(
            spark,
            settings,
            input_path=input_path,
            pair=Pair(src, tgt),
            job_id=job_id,
            id_column=id_column,
            text_column=text_column,
            tenant=tenant,
            domain=domain,
            topic=topic,
            max_segments=max_segments,
            text_format=text_format,
            glossary=glossary,
        )
    finally:
        spark.stop()
    click.echo(json.dumps(report))


@bulk.command("spark-assemble")
@click.option("--job-id", required=True, help="The job id given to spark-submit.")
@click.option("--output", "-o", required=True, help="Output Parquet folder.")
@click.option("--results-topic", default=None, help="[default: translate.results]")
@click.option(
    "--files",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Output part files (each holds a contiguous range of input order).",
)
@click.option("--master", default=None, help="Spark master [default: bulk.spark_master].")
@click.pass_obj
def spark_assemble(
    settings: Settings,
    job_id: str,
    output: str,
    results_topic: str | None,
    files: int,
    master: str | None,
) -> None:
    """Assemble a Spark-submitted job's results (batch read of translate.results) into Parquet."""
    from jobs import bulk_spark

    job_id = _checked_job_id(job_id)
    _require_spark_services(settings, master)
    spark = bulk_spark.bulk_session(settings, f"babelstream-bulk-assemble-{job_id}", master)
    try:
        report = bulk_spark.assemble(
            spark,
            settings,
            job_id=job_id,
            output=output,
            results_topic=results_topic,
            files=files,
        )
    finally:
        spark.stop()
    click.echo(json.dumps(report))
