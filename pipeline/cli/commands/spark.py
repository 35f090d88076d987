"""``babelstream spark up | down | status``: a local Spark standalone cluster for the SLA job."""

from __future__ import annotations

import click

from pipeline.cli.commands.stack import _print_status, _report
from pipeline.settings import Settings
from pipeline.stack import manager
from pipeline.stack.spark import spark_services


@click.group()
def spark() -> None:
    """A Spark standalone master and workers from pyspark's own launcher (no download).

    Run the SLA job there with `babelstream sla --master spark://HOST:PORT`
    (BABELSTREAM_SPARK__* settings: host, ports, workers, cores, memory).
    """


@spark.command()
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
@click.pass_obj
def up(settings: Settings, as_json: bool) -> None:
    """Start the master and the workers (no-op for what already runs)."""
    manager.start(settings, spark_services(settings), _report)
    names = {s.name for s in spark_services(settings)}
    _print_status([s for s in manager.status(settings) if s.name in names], as_json)
    click.echo(f"master: {settings.spark.master_url}", err=True)


@spark.command()
@click.pass_obj
def down(settings: Settings) -> None:
    """Stop the cluster's daemons (only those `spark up` started)."""
    manager.down(settings, _report, names={s.name for s in spark_services(settings)})
