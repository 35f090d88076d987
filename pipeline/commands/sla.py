"""``babelstream sla``: run the Spark SLA job (:mod:`jobs.sla`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from pipeline.commands.options import DURATION
from pipeline.errors import BabelStreamError, ConfigError
from pipeline.reachability import require_kafka, require_spark_master
from pipeline.settings import Settings, SlaSettings
from pipeline.sla import RunSummary, parse_thresholds


def sla_settings(base: SlaSettings, overrides: dict[str, Any],
                 thresholds: tuple[str, ...] = ()) -> SlaSettings:
    """``base`` with the options that were given (None = not given) and extra thresholds."""
    fields = {**base.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    fields["thresholds_ms"] = {**base.thresholds_ms, **parse_thresholds(thresholds)}
    return SlaSettings.model_validate(fields)


def _sinks(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(s.strip() for s in value.split(",") if s.strip())


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT / SIGTERM, so the job stops between micro-batches."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def summary_line(summary: RunSummary) -> str:
    """The one-line report printed when the job stops."""
    return (f"sla: {summary.input_rows} results in {len(summary.input_batches)} batches, "
            f"{summary.windows} windows emitted, {summary.wall_s:.1f}s")


@click.command()
@click.option("--window", type=DURATION, help="Window size, e.g. 5s.")
@click.option("--slide", type=DURATION, help="Slide (default: the window size, tumbling).")
@click.option("--watermark", type=DURATION, help="Allowed lateness, e.g. 30s.")
@click.option("--trigger", type=DURATION, help="Micro-batch interval, e.g. 1s.")
@click.option("--sinks", help="Comma-separated: kafka,parquet,console.")
@click.option("--checkpoint", type=click.Path(path_type=Path), help="Checkpoint folder.")
@click.option("--history", type=click.Path(path_type=Path), help="Parquet history folder.")
@click.option("--source-topic", help="Results topic to read (default translate.results).")
@click.option("--sink-topic", help="Topic for SlaWindow messages (default translate.sla).")
@click.option("--starting-offsets", type=click.Choice(["earliest", "latest"]),
              help="Where a fresh checkpoint starts reading.")
@click.option("--threshold", "thresholds", multiple=True, metavar="PAIR=MS",
              help="A pair's SLA latency threshold (repeatable); others use the default.")
@click.option("--until-idle", type=DURATION,
              help="Stop once no new input has arrived for this long (back-fills, tests).")
@click.pass_obj
def sla(settings: Settings, thresholds: tuple[str, ...], until_idle: float | None,
        sinks: str | None, **options: Any) -> None:
    """Windowed P50/P95/P99 latency and timeout/error/cache-hit ratios per pair.

    Reads results, writes one SlaWindow per pair and window once the watermark
    passes it; stop with Ctrl-C (the checkpoint resumes where it stopped).
    Options left out come from the settings (BABELSTREAM_SLA__<FIELD>).
    """
    overrides = {
        "window_s": options["window"], "slide_s": options["slide"],
        "watermark_s": options["watermark"], "trigger_s": options["trigger"],
        "sinks": _sinks(sinks), "checkpoint_dir": options["checkpoint"],
        "history_dir": options["history"], "source_topic": options["source_topic"],
        "sink_topic": options["sink_topic"], "starting_offsets": options["starting_offsets"],
    }
    try:
        job_settings = settings.model_copy(
            update={"sla": sla_settings(settings.sla, overrides, thresholds)})
    except (ValidationError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    require_kafka(settings.kafka)
    require_spark_master(job_settings.sla.master, settings.kafka.connect_timeout_s)
    from jobs.sla import run

    with stop_on_signals() as stop:
        try:
            summary = run(job_settings, until_idle_s=until_idle, stop=stop)
        except BabelStreamError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(summary_line(summary), err=True)
