"""``babelstream topics migrate``: what older releases left in per-pair work topics."""

from __future__ import annotations

import json

import click

from pipeline.settings import Settings


@click.group()
def topics() -> None:
    """The project's topics on the cluster."""


@topics.command()
@click.option(
    "--group",
    default="babelstream",
    show_default=True,
    help="The consumer group that served the per-pair topics (its committed offsets say "
    "what was not consumed yet).",
)
@click.option("--dry-run", is_flag=True, help="Count what waits; copy and commit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def migrate(settings: Settings, group: str, dry_run: bool, as_json: bool) -> None:
    """Copy the records a group has not consumed from per-pair work topics
    (translate.requests.<pair>, translate.bulk.<pair>, releases before 0.2) to the work
    topics of the models that serve their pairs, then commit the group past them.

    Run it once after upgrading, with the group's workers stopped (it refuses while the
    group has members); running it again copies nothing twice. Records of a pair no
    model serves stay where they are (reported).
    The old topics are left in place: delete them once this reports nothing waiting.
    """
    from pipeline.control.migrate import migrate as run

    migration = run(settings, group, dry_run=dry_run)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "group": group,
                    "dry_run": dry_run,
                    "copied": migration.copied,
                    "topics": [
                        {
                            "topic": t.name,
                            "target": t.target,
                            "waiting": t.waiting,
                            "copied": t.copied,
                        }
                        for t in migration.topics
                    ],
                }
            )
        )
        return
    if not migration.topics:
        click.echo("no per-pair work topics on the cluster: nothing to migrate")
        return
    for t in migration.topics:
        where = t.target or "no model serves this pair: left in place"
        verb = "would copy" if dry_run else "copied"
        count = t.waiting if dry_run else t.copied
        click.echo(f"{t.name}: {t.waiting} waiting; {verb} {count} -> {where}")
    for t in migration.stranded:
        click.echo(
            f"{t.name}: {t.waiting} records of {t.pair.id}, which no model serves; add a "
            "model for it and migrate again",
            err=True,
        )
