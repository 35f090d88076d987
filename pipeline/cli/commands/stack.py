"""``babelstream up | down | status``: the local dev stack (Kafka KRaft + Redis under ``var/``)."""

from __future__ import annotations

import json

import click

from pipeline.cli.status import ComponentStatus, components
from pipeline.settings import Settings
from pipeline.stack import layout, manager


def _report(line: str) -> None:
    click.echo(line, err=True)


def _service_line(s: manager.ServiceStatus) -> str:
    state = "healthy" if s.healthy else "DOWN"
    # no pid: a healthy service nobody here started, or nothing at all
    owner = f"pid {s.pid}" if s.pid else "not started by us" if s.healthy else "not running"
    return f"{s.name:<9} {s.address:<22} {state:<8} {s.version or '-':<8} {owner}  {s.detail}"


def _print_status(
    statuses: list[manager.ServiceStatus],
    as_json: bool,
    others: list[ComponentStatus] | None = None,
) -> None:
    if as_json:
        doc: dict[str, object] = {
            "healthy": all(s.healthy for s in statuses),
            "services": [s.to_dict() for s in statuses],
        }
        if others is not None:
            doc["components"] = [c.to_dict() for c in others]
        click.echo(json.dumps(doc, indent=2))
        return
    for s in statuses:
        click.echo(_service_line(s))
    for c in others or []:
        click.echo(
            f"{c.name:<9} {c.address:<22} {c.state or ('running' if c.running else '-'):<8} "
            f"{'':<8} {c.detail}"
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    help="Kafka nodes (default: stack.brokers, 1). 3 = a cluster with replication "
    "3 and min ISR 2 unless kafka.* says otherwise.",
)
@click.option(
    "--secure/--plaintext",
    default=None,
    help="SASL_SSL (SCRAM-SHA-512) + mutual-TLS listeners and a TLS Redis with an "
    "ACL user, certificates generated under var/secure (default: stack.secure).",
)
@click.pass_obj
def up(settings: Settings, as_json: bool, brokers: int | None, secure: bool | None) -> None:
    """Start Kafka and Redis (no-op for what already runs) and create the topics."""
    statuses = manager.up(layout.with_layout(settings, brokers, secure), _report)
    _print_status(statuses, as_json)


@click.command()
@click.pass_obj
def down(settings: Settings) -> None:
    """Stop the processes `babelstream up` started."""
    manager.down(settings, _report)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(settings: Settings, as_json: bool) -> None:
    """Kafka (every node) and Redis (health, address, version, pid), then the workers
    (consumer groups: members, partitions, lag, readiness), the SLA job and the dashboard.

    Exits 1 if a Kafka node or Redis is unhealthy; workers, the SLA job and the
    dashboard are reported but do not change the exit code.
    """
    statuses = manager.status(settings)
    kafka_up = any(s.name.startswith("kafka") and s.healthy for s in statuses)
    # the running stack's client settings: its nodes, and its credentials when secure
    clients = manager.endpoints(settings).settings
    _print_status(statuses, as_json, components(clients, kafka_up))
    if not all(s.healthy for s in statuses):
        raise SystemExit(1)
