"""``babelstream dashboard``: the live SLA page."""

from __future__ import annotations

import click

from pipeline.settings import Settings


@click.command()
@click.option("--host", default=None, help="Interface to bind [default: dashboard.host].")
@click.option("--port", type=int, default=None, help="Port [default: dashboard.port, 8050].")
@click.option("--topic", default=None, help="SLA topic to read [default: sla.sink_topic].")
@click.pass_obj
def dashboard(settings: Settings, host: str | None, port: int | None, topic: str | None) -> None:
    """Serve live SLA charts per pair (P95/P99, timeouts, throughput, cache hits)."""
    from pipeline.dashboard.server import run

    run(settings, host=host, port=port, topic=topic)
