"""``babelstream bench ...``: benchmarks that print JSON."""

from __future__ import annotations

import click

from pipeline.cli import LazyGroup

BENCHES: dict[str, str] = {
    "engine": "pipeline.commands.bench_engine:engine",
    "e2e": "pipeline.commands.bench_pipeline:e2e",
    "naive": "pipeline.commands.bench_pipeline:naive",
    "sla": "pipeline.commands.bench_sla:sla",
    "compare": "pipeline.commands.bench_pipeline:compare",
    "interference": "pipeline.commands.bench_bulk:interference",
    "bulk-memory": "pipeline.commands.bench_memory:bulk_memory",
    "fairness": "pipeline.commands.bench_fairness:fairness",
}


@click.group(cls=LazyGroup, lazy=BENCHES)
def bench() -> None:
    """Benchmarks; each prints one JSON document."""
