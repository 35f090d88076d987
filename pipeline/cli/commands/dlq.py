"""``babelstream dlq list | replay | quarantine``: dead letters and quarantined records."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, get_args

import click

from pipeline.cli.commands.options import INSTANT
from pipeline.contract.messages import DeadLetterReason, now_ms
from pipeline.contract.pairs import DLQ_REPLAYED_TOPIC, QUARANTINE_TOPIC
from pipeline.control.dead_letters import (
    LetterFilter,
    Replayer,
    plan_replay,
    read_dead_letters,
    read_replayed,
)
from pipeline.control.quarantine import describe, quarantined, release
from pipeline.kafka.topics import ensure_named
from pipeline.settings import Settings

REASONS = get_args(DeadLetterReason)


def _filter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--since",
        type=INSTANT,
        default=None,
        help="Only letters received since: a duration back (15m, 2h, 1d), ISO 8601, "
        "epoch ms or now-<duration>.",
    )(f)
    return click.option(
        "--reason",
        "reasons",
        multiple=True,
        type=click.Choice(REASONS),
        help="Only letters with this reason (repeatable).",
    )(f)


@click.group()
def dlq() -> None:
    """Dead letters on translate.dlq: list them, replay them once the cause is fixed."""


@dlq.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per letter.")
@click.pass_obj
def list_letters(
    settings: Settings, reasons: tuple[str, ...], since: int | None, as_json: bool
) -> None:
    """List dead letters (id, reason, when, error) and whether each was replayed."""
    ensure_named(settings, DLQ_REPLAYED_TOPIC)
    letters = read_dead_letters(settings.kafka, LetterFilter(reasons, since))
    replayed = read_replayed(settings.kafka)
    for stored in letters:
        letter = stored.letter
        if as_json:
            doc = {
                "id": stored.id,
                "replayed": stored.id in replayed,
                **letter.model_dump(exclude_none=True),
            }
            click.echo(json.dumps(doc, ensure_ascii=False))
            continue
        when = datetime.fromtimestamp(letter.received_at / 1000, UTC)
        mark = "replayed" if stored.id in replayed else "-"
        click.echo(
            f"{stored.id}  {letter.reason:<19} {when:%Y-%m-%d %H:%M:%S}  {mark:<8}  "
            f"{letter.error[:100]}"
        )
    click.echo(f"{len(letters)} dead letter(s)", err=True)


@dlq.command()
@_filter_options
@click.option(
    "--id",
    "ids",
    multiple=True,
    help="Only this letter (<topic>:<partition>:<offset>, as `dlq list` shows).",
)
@click.option(
    "--fix-limits",
    is_flag=True,
    help="Clamp timeout_ms into the allowed range (texts and metadata over their "
    "limits cannot be fixed and are refused).",
)
@click.option(
    "--restamp",
    is_flag=True,
    help="Set submitted_at to now, so the deadline runs from the replay "
    "[default: the original bytes, original deadline].",
)
@click.option("--dry-run", is_flag=True, help="Say what would be replayed; publish nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def replay(
    settings: Settings,
    reasons: tuple[str, ...],
    since: int | None,
    ids: tuple[str, ...],
    fix_limits: bool,
    restamp: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Re-publish chosen dead letters to translate.requests, each at most once.

    Letters whose request would be refused again under the current limits
    are left alone and listed.
    """
    if not (reasons or since is not None or ids):
        raise click.UsageError("choose letters with --reason, --since or --id")
    ensure_named(settings, DLQ_REPLAYED_TOPIC)
    letters = read_dead_letters(settings.kafka, LetterFilter(reasons, since, ids))
    restamp_at = now_ms() if restamp else None
    if dry_run:
        plan = plan_replay(
            letters,
            read_replayed(settings.kafka),
            settings.limits,
            fix_limits=fix_limits,
            restamp_at=restamp_at,
        )
    else:
        with Replayer(settings.kafka) as replayer:  # fences any other replayer first
            plan = plan_replay(
                letters,
                replayer.replayed(),
                settings.limits,
                fix_limits=fix_limits,
                restamp_at=restamp_at,
            )
            replayer.publish(plan.replays)
    summary = {**plan.summary(), "dry_run": dry_run, "matched": len(letters)}
    if as_json:
        click.echo(json.dumps(summary))
        return
    for letter_id, why in plan.refused.items():
        click.echo(f"not replayed {letter_id}: {why}", err=True)
    verb = "would replay" if dry_run else "replayed"
    click.echo(
        f"{verb} {summary['replayed']} of {len(letters)} matching dead letter(s); "
        f"{summary['already_replayed']} already replayed, {summary['refused']} refused"
    )


@dlq.group("quarantine")
def quarantine_group() -> None:
    """Records set apart for breaking a worker's steps (translate.quarantine).

    A worker ends a quarantined record without running it, also after a
    restart. Release one once the cause is fixed: its original bytes are
    published again to the topic it came from, and the entry is removed.
    """


@quarantine_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
@click.pass_obj
def list_quarantined(settings: Settings, as_json: bool) -> None:
    """Every quarantined record, and every suspect a worker has still to try alone."""
    ensure_named(settings, QUARANTINE_TOPIC)
    entries = quarantined(settings)
    if as_json:
        for entry in entries:
            click.echo(entry.model_dump_json(exclude_none=True))
        return
    for line in describe(entries):
        click.echo(line)
    click.echo(f"{len(entries)} record(s) in quarantine", err=True)


@quarantine_group.command("release")
@click.argument("ids", nargs=-1, required=True)
@click.pass_obj
def release_quarantined(settings: Settings, ids: tuple[str, ...]) -> None:
    """Publish the quarantined records IDS (<topic>:<partition>:<offset>) again and
    remove them from quarantine."""
    ensure_named(settings, QUARANTINE_TOPIC)
    try:
        released = release(settings, ids)
    except KeyError as exc:
        raise click.BadParameter(f"not in quarantine: {exc.args[0]}", param_hint="IDS") from None
    for entry in released:
        click.echo(f"released {entry.record_id}: published again to {entry.source_topic}")
