"""``babelstream dashboard``: the live SLA page."""

from __future__ import annotations

import socket

import click

from pipeline.kafka.reachability import require_kafka
from pipeline.settings import Settings


def _check_free(host: str, port: int) -> None:
    """Refuse a port something else listens on, before the server starts its Kafka feed."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
            sock.bind((host, port))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port "
            "(or BABELSTREAM_DASHBOARD__PORT)",
            param_hint="'--port'",
        ) from exc


@click.command()
@click.option("--host", default=None, help="Interface to bind [default: dashboard.host].")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port, 0 for any free one [default: dashboard.port, 8050].",
)
@click.option("--topic", default=None, help="SLA topic to read [default: sla.sink_topic].")
@click.pass_obj
def dashboard(settings: Settings, host: str | None, port: int | None, topic: str | None) -> None:
    """Serve live SLA charts per pair (P95/P99, timeouts, throughput, cache hits)."""
    from pipeline.sla.dashboard.server import run

    _check_free(host or settings.dashboard.host, settings.dashboard.port if port is None else port)
    require_kafka(settings.kafka)
    run(settings, host=host, port=port, topic=topic)
