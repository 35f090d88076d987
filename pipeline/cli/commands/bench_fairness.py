"""``babelstream bench fairness``: a steady tenant's P99 while another tenant floods."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from pipeline.bench.fairness import measure_fairness
from pipeline.bench.report import Machine
from pipeline.settings import Settings


@click.command()
@click.option(
    "--flood",
    type=click.IntRange(min=1),
    default=3_000,
    show_default=True,
    help="Requests the flooding tenant submits at once.",
)
@click.option(
    "--steady",
    type=click.IntRange(min=1),
    default=600,
    show_default=True,
    help="Requests of the steady tenant per phase.",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Alone and fair-share phases, alternated; percentiles pool every repeat.",
)
@click.option(
    "--rate",
    type=float,
    default=10.0,
    show_default=True,
    help="The steady tenant's requests per second.",
)
@click.option(
    "--quantum-chars",
    type=click.IntRange(min=1),
    default=None,
    help="Fair-share quantum [default: tenants.quantum_chars].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line.")
@click.pass_obj
def fairness(
    settings: Settings,
    flood: int,
    steady: int,
    rate: float,
    repeat: int,
    quantum_chars: int | None,
    as_json: bool,
) -> None:
    """Steady tenant's P99 alone, under a flood with fair share, and without (starts workers)."""
    machine = Machine.current()  # before the runs load the machine
    doc = measure_fairness(
        settings,
        flood=flood,
        steady=steady,
        rate=rate,
        repeat=repeat,
        quantum_chars=quantum_chars,
    )
    doc["machine"] = asdict(machine)
    click.echo(json.dumps(doc, indent=None if as_json else 2))
