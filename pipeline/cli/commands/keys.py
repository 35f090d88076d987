"""``babelstream keys add | list | revoke``: the gateway's API keys, each a tenant's."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.gateway.keys import KeyStore


def key_store(settings: Settings) -> KeyStore:
    """The gateway's API keys in the configured Redis."""
    from pipeline.gateway.keys import KeyStore
    from pipeline.storage.redis_client import redis_client

    return KeyStore(redis_client(settings.redis), settings.redis.key_prefix)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


@click.group()
def keys() -> None:
    """API keys of the HTTP gateway; a key's calls count for its tenant (quota, fair share)."""


@keys.command()
@click.option(
    "--tenant", required=True, help="Tenant whose quota and fair share the key's calls use."
)
@click.option("--label", default=None, help="A note to recognise the key by (who has it).")
@click.option(
    "--req-limit",
    type=click.IntRange(1),
    default=None,
    help="Calls per minute for this key (default: the gateway's gateway.req_limit).",
)
@click.option(
    "--char-limit",
    type=click.IntRange(1),
    default=None,
    help="Characters per call for this key (default: the gateway's gateway.char_limit).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the key and its id as JSON.")
@click.pass_obj
def add(
    settings: Settings,
    tenant: str,
    label: str | None,
    req_limit: int | None,
    char_limit: int | None,
    as_json: bool,
) -> None:
    """Make a key for TENANT and print it (only now: Redis keeps its digest)."""
    api_key, info = key_store(settings).add(tenant, label, req_limit, char_limit)
    if as_json:
        click.echo(json.dumps({"api_key": api_key, **info.to_dict()}))
    else:
        click.echo(api_key)
        click.echo(f"id {info.id}, tenant {info.tenant}", err=True)


@keys.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_keys(settings: Settings, as_json: bool) -> None:
    """Every key: id, tenant, label, when it was made (never the key itself)."""
    found = key_store(settings).list()
    if as_json:
        click.echo(json.dumps([k.to_dict() for k in found]))
        return
    if not found:
        click.echo("no API keys (make one with `babelstream keys add --tenant NAME`)", err=True)
    for k in found:
        limits = ", ".join(
            f"{name} {value}"
            for name, value in (("req_limit", k.req_limit), ("char_limit", k.char_limit))
            if value is not None
        )
        note = "  ".join(part for part in (k.label or "", f"({limits})" if limits else "") if part)
        click.echo(f"{k.id}  {k.tenant:<20} {_when(k.created_at)}  {note}".rstrip())


@keys.command()
@click.argument("key_or_id")
@click.pass_obj
def revoke(settings: Settings, key_or_id: str) -> None:
    """Remove a key, named by its id (from `keys list`) or by the key itself."""
    from pipeline.gateway.keys import ApiKeyError

    try:
        info = key_store(settings).revoke(key_or_id)
    except ApiKeyError as exc:
        raise click.BadParameter(str(exc), param_hint="'KEY_OR_ID'") from None
    click.echo(f"revoked {info.id} (tenant {info.tenant})", err=True)
