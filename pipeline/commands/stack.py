"""``babelstream up | down | status``: the local dev stack (Kafka KRaft + Redis under ``var/``)."""

from __future__ import annotations

import json

import click

from pipeline.errors import StackError
from pipeline.settings import Settings
from pipeline.stack import manager


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
        click.echo(f"{s.name:<14} {s.address:<16} {state:<8} {s.version or '-':<8} {pid}  "
                   f"{s.detail}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
@click.pass_obj
def up(settings: Settings, as_json: bool) -> None:
    """Start Kafka and Redis (no-op for what already runs) and create the topics."""
    try:
        statuses = manager.up(settings, _report)
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
    statuses = manager.status(settings)
    _print_status(statuses, as_json)
    if not all(s.healthy for s in statuses):
        raise SystemExit(1)
