"""``babelstream bench bulk-memory``: peak RSS of ``bulk run`` as the corpus grows."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

import click

from pipeline.bench.bulk_memory import measure_bulk_memory
from pipeline.bench.report import Machine
from pipeline.settings import Settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess

BENCH_BULK_BATCH = 256


@click.command("bulk-memory")
@click.option(
    "--mb",
    "sizes",
    type=float,
    multiple=True,
    default=(64.0, 256.0),
    show_default=True,
    help="Corpus sizes in MB of text (repeatable).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where corpora and outputs go [default: a temporary folder].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line.")
@click.pass_obj
def bulk_memory(
    settings: Settings, sizes: tuple[float, ...], work_dir: Path | None, as_json: bool
) -> None:
    """Run `bulk run` on generated corpora of each size; print peak RSS per size.

    Starts a worker; the corpus and output of each size are written to
    --work-dir (a 2 GB corpus needs about 2 GB there, plus its output).
    """
    machine = Machine.current()  # before the runs load the machine
    log_path = settings.stack.home / "log" / "bench-worker.log"
    # No interactive traffic to protect: large bulk batches, so the worker's per-batch
    # overhead does not decide how long a big corpus takes (the runner is measured).
    worker_env = {"BABELSTREAM_WORKER__BULK_MAX_MESSAGES": str(BENCH_BULK_BATCH)}
    with (
        WorkerProcess(settings, log_path=log_path, env=worker_env),
        tempfile.TemporaryDirectory() as tmp,
    ):
        base = work_dir or Path(tmp)
        runs = [measure_bulk_memory(base, size, DEMO_PAIR) for size in sizes]
    peaks = [run["peak_rss_mb"] for run in runs]
    doc = {
        "bench": "bulk-memory",
        "runs": runs,
        "peak_rss_growth_mb": round(max(peaks) - min(peaks), 1),
        "under_500mb": max(peaks) < 500,
        "bulk": {
            "max_in_flight": settings.bulk.max_in_flight,
            "window_bytes": settings.bulk.window_bytes,
            "worker_bulk_max_messages": BENCH_BULK_BATCH,
        },
        "machine": asdict(machine),
    }
    click.echo(json.dumps(doc, indent=None if as_json else 2))
