"""``babelstream cancel REQUEST_ID...``: cancel requests that have not been translated yet."""

from __future__ import annotations

import click

from pipeline.control.cancels import cancels_for, publish_cancels
from pipeline.settings import Settings


@click.command()
@click.argument("request_ids", nargs=-1, required=True)
@click.option(
    "--by",
    "requested_by",
    default="operator",
    show_default=True,
    help="Who cancels (shown in the cancelled results' error text).",
)
@click.pass_obj
def cancel(settings: Settings, request_ids: tuple[str, ...], requested_by: str) -> None:
    """Cancel REQUEST_ID... (ids printed by `submit`).

    A request that has not reached the engine yet ends as status `cancelled`
    without being translated; one already translated ends as usual.
    """
    count = publish_cancels(settings, cancels_for(request_ids, requested_by=requested_by))
    click.echo(f"cancelled {count} request(s)", err=True)
