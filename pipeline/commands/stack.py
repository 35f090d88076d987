"""``babelstream up | down | status``: the local dev stack (Kafka KRaft + Redis under ``var/``)."""

from __future__ import annotations

import json

import click

from pipeline.errors import StackError
from pipeline.settings import Settings
from pipeline.stack import layout, manager


def _report(line: str) -> None:
    click.echo(line, err=True)


def _print_status(statuses: list[manager.ServiceStatus], as_json: bool) -> None:
    if as_json:
        doc = {"healthy": all(s.healthy for s in statuses),
               "services": [s.to_dict() for s in statuses]}
        click.echo(json.dumps(doc, indent=2))
        return
    for s in statuses:
        state = "healthy" if s.healthy else "DOWN"
        pid = f"pid {s.pid}" if s.pid else "not started by us"
        click.echo(f"{s.name:<8} {s.address:<16} {state:<8} {s.version or '-':<8} {pid}  "
                   f"{s.detail}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
@click.option("--brokers", type=click.IntRange(1, 9),
              help="Kafka nodes (default: stack.brokers, 1). 3 = a cluster with replication "
                   "3 and min ISR 2 unless kafka.* says otherwise.")
@click.option("--secure/--plaintext", default=None,
              help="SASL_SSL (SCRAM-SHA-512) + mutual-TLS listeners and a TLS Redis with an "
                   "ACL user, certificates generated under var/secure (default: stack.secure).")
@click.pass_obj
def up(settings: Settings, as_json: bool, brokers: int | None, secure: bool | None) -> None:
    """Start Kafka and Redis (no-op for what already runs) and create the topics."""
    try:
        statuses = manager.up(layout.with_layout(settings, brokers, secure), _report)
    except StackError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_status(statuses, as_json)


@click.command()
@click.pass_obj
def down(settings: Settings) -> None:
    """Stop the processes `babelstream up` started."""
    try:
        manager.down(settings, _report)
    except StackError as exc:
        raise click.ClickException(str(exc)) from exc


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(settings: Settings, as_json: bool) -> None:
    """Health, address, version and pid of each service; exit 1 if any is unhealthy."""
    try:
        statuses = manager.status(settings)
    except StackError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_status(statuses, as_json)
    if not all(s.healthy for s in statuses):
        raise SystemExit(1)
