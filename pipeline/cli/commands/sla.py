"""``babelstream sla``: run the Spark SLA job (:mod:`jobs.sla`); ``sla report``: any period."""

from __future__ import annotations

import functools
import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from pipeline.cli.commands.options import DURATION, INSTANT
from pipeline.cli.durations import utc_iso
from pipeline.cli.sla_run import marked_run
from pipeline.errors import BabelStreamError, ConfigError
from pipeline.kafka.reachability import require_kafka, require_spark_master
from pipeline.settings import Settings, SlaSettings
from pipeline.sla.history import PeriodReport, period_report
from pipeline.sla.logic import RunSummary, parse_thresholds


def sla_settings(
    base: SlaSettings, overrides: dict[str, Any], thresholds: tuple[str, ...] = ()
) -> SlaSettings:
    """``base`` with the options that were given (None = not given) and extra thresholds."""
    fields = {**base.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    fields["thresholds_ms"] = {**base.thresholds_ms, **parse_thresholds(thresholds)}
    return SlaSettings.model_validate(fields)


def _sinks(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(s.strip() for s in value.split(",") if s.strip())


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT / SIGTERM, so the job stops between micro-batches
    (:func:`stop_on` sets the handlers again once something replaced them)."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    stop_on(stop)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_on(stop: threading.Event) -> None:
    """SIGINT and SIGTERM set ``stop`` (and do nothing else)."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())


def summary_line(summary: RunSummary) -> str:
    """The one-line report printed when the job stops."""
    read = (
        f"{summary.input_rows} records"
        if summary.results is None
        else f"{summary.results} results and {summary.input_rows - summary.results} ticks"
    )
    return (
        f"sla: {read} in {len(summary.input_batches)} batches, "
        f"{summary.windows} windows emitted, {summary.late_rows} late rows, "
        f"{summary.wall_s:.1f}s"
    )


@click.group(invoke_without_command=True)
@click.option("--window", type=DURATION, help="Window size, e.g. 5s.")
@click.option("--slide", type=DURATION, help="Slide (default: the window size, tumbling).")
@click.option("--watermark", type=DURATION, help="Allowed lateness, e.g. 30s.")
@click.option("--trigger", type=DURATION, help="Micro-batch interval, e.g. 1s.")
@click.option("--sinks", help="Comma-separated: kafka,parquet,console.")
@click.option("--checkpoint", type=click.Path(path_type=Path), help="Checkpoint folder.")
@click.option("--history", type=click.Path(path_type=Path), help="Parquet history folder.")
@click.option("--source-topic", help="Results topic to read (default translate.results).")
@click.option("--sink-topic", help="Topic for SlaWindow messages (default translate.sla).")
@click.option(
    "--starting-offsets",
    type=click.Choice(["earliest", "latest"]),
    help="Where a fresh checkpoint starts reading.",
)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="PAIR=MS",
    help="A pair's SLA latency threshold (repeatable); others use the default.",
)
@click.option(
    "--until-idle",
    type=DURATION,
    help="Stop once no new input has arrived for this long (back-fills, tests).",
)
@click.option("--master", help="Spark master, e.g. spark://127.0.0.1:7077 (default local[2]).")
@click.option(
    "--late-rows/--no-late-rows",
    default=True,
    show_default=True,
    help="Write late rows to translate.sla.late (a stateless branch of the query).",
)
@click.pass_context
def sla(
    ctx: click.Context,
    /,
    thresholds: tuple[str, ...],
    until_idle: float | None,
    sinks: str | None,
    late_rows: bool,
    **options: Any,
) -> None:
    """Windowed P50/P95/P99 latency and timeout/error/cache-hit ratios per pair.

    Reads results, writes one SlaWindow per pair, priority class and window
    once the watermark passes it; stop with Ctrl-C (the checkpoint resumes
    where it stopped). Options left out come from the settings
    (BABELSTREAM_SLA__<FIELD>). `sla report` merges the history over a period.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    overrides = {
        "window_s": options["window"],
        "slide_s": options["slide"],
        "watermark_s": options["watermark"],
        "trigger_s": options["trigger"],
        "sinks": _sinks(sinks),
        "checkpoint_dir": options["checkpoint"],
        "history_dir": options["history"],
        "source_topic": options["source_topic"],
        "sink_topic": options["sink_topic"],
        "starting_offsets": options["starting_offsets"],
        "master": options["master"],
    }
    try:
        job_settings = settings.model_copy(
            update={"sla": sla_settings(settings.sla, overrides, thresholds)}
        )
    except (ValidationError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    require_kafka(settings.kafka)
    require_spark_master(job_settings.sla.master, settings.kafka.connect_timeout_s)
    from jobs.sla import run

    with stop_on_signals() as stop, marked_run(job_settings.sla.checkpoint_dir):
        try:
            summary = run(
                job_settings,
                until_idle_s=until_idle,
                stop=stop,
                late_rows=late_rows,
                # Spark's context took SIGINT over: Ctrl-C would cancel its jobs mid-batch
                on_session=functools.partial(stop_on, stop),
            )
        except BabelStreamError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(summary_line(summary), err=True)


def report_lines(report: PeriodReport) -> list[str]:
    """The human-readable report."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f} ms"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    error = "" if report.rank_error is None else f" (rank error ±{report.rank_error:.2%})"
    lines = [
        f"{report.pair} {report.priority} [{utc_iso(report.from_ms)}, {utc_iso(report.to_ms)}): "
        f"{report.windows} windows, {report.count} results",
        f"  P50 {ms(report.p50_ms)}  P95 {ms(report.p95_ms)}  P99 {ms(report.p99_ms)}{error}",
        f"  timeout {ratio(report.timeout_ratio)}  error {ratio(report.error_ratio)}  "
        f"cancel {ratio(report.cancel_ratio)}  rejected {ratio(report.rejected_ratio)}  "
        f"duplicates {report.duplicates}  late {report.late}",
    ]
    for name, target in report.objectives.items():
        met = report.met.get(name)
        verdict = "-" if met is None else ("met" if met else "MISSED")
        share = report.windows_met.get(name)
        windows = "" if share is None else f" ({share:.1%} of windows met it)"
        lines.append(f"  objective {name} {target:g}: {verdict}{windows}")
    if report.windows_without_sketch:
        lines.append(
            f"  note: {report.windows_without_sketch} windows have no sketch and are "
            "not in the percentiles"
        )
    return lines


@sla.command("report")
@click.option("--pair", required=True, help="Pair id (or `unsupported`).")
@click.option(
    "--priority",
    type=click.Choice(["interactive", "bulk"]),
    default="interactive",
    show_default=True,
    help="Priority class of the series.",
)
@click.option(
    "--from",
    "from_ms",
    type=INSTANT,
    default="now-1h",
    show_default=True,
    help="Start: ISO 8601, epoch ms, or now-<duration> (now-30d).",
)
@click.option(
    "--to",
    "to_ms",
    type=INSTANT,
    default="now",
    show_default=True,
    help="End (exclusive), same forms.",
)
@click.option(
    "--history",
    type=click.Path(path_type=Path),
    help="Parquet history folder [default: sla.history_dir].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def report(
    settings: Settings,
    pair: str,
    priority: str,
    from_ms: int,
    to_ms: int,
    history: Path | None,
    as_json: bool,
) -> None:
    """P50/P95/P99, ratios and objective compliance over a period, from merged sketches."""
    if to_ms <= from_ms:
        raise click.BadParameter("--to must be after --from", param_hint="--to")
    sla_settings = settings.sla
    if history is not None:
        sla_settings = sla_settings.model_copy(update={"history_dir": history})
    result = period_report(sla_settings, pair, priority, from_ms, to_ms)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo("\n".join(report_lines(result)))
