"""``babelstream glossary put|list|get|delete``: per-tenant glossaries in Redis."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
import redis

from pipeline.errors import ContractError
from pipeline.fairness import DEFAULT_TENANT
from pipeline.fidelity.store import GlossaryError, GlossaryStore, StoredGlossary, read_terms
from pipeline.pairs import Pair
from pipeline.settings import Settings

T = TypeVar("T")


def _store(settings: Settings) -> GlossaryStore:
    return GlossaryStore(settings.redis)


def _pair(value: str) -> str:
    try:
        return Pair.parse(value).id
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None


def _summary(stored: StoredGlossary) -> dict[str, object]:
    return {
        "tenant": stored.tenant,
        "pair": stored.pair,
        "name": stored.name,
        "version": stored.version,
        "updated_at": stored.updated_at,
        "terms": len(stored.terms),
    }


def _run(action: Callable[[], T]) -> T:
    """Run ``action``, turning store and Redis errors into one-line CLI errors."""
    try:
        return action()
    except GlossaryError as exc:
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None


_tenant = click.option(
    "--tenant",
    default=DEFAULT_TENANT,
    show_default=True,
    help="Tenant the glossary belongs to (requests that name no tenant are the default's).",
)
_pair_opt = click.option("--pair", required=True, help="Pair id, e.g. en_de.")
_name = click.option("--name", default="default", show_default=True, help="Glossary name.")


@click.group()
def glossary() -> None:
    """Glossaries and do-not-translate terms per tenant and pair (stored in Redis)."""


@glossary.command("put")
@_tenant
@_pair_opt
@_name
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def put(settings: Settings, tenant: str, pair: str, name: str, file: Path) -> None:
    """Store FILE (TSV or CSV: source[,target]; no target = do not translate) as a new version."""
    terms = _run(lambda: read_terms(file, settings.fidelity.max_terms))
    stored = _run(lambda: _store(settings).put(tenant, _pair(pair), name, terms))
    click.echo(json.dumps(_summary(stored)))


@glossary.command("list")
@_tenant
@click.pass_obj
def list_(settings: Settings, tenant: str) -> None:
    """The tenant's glossaries, one JSON line each."""
    for stored in _run(lambda: _store(settings).list(tenant)):
        click.echo(json.dumps(_summary(stored)))


@glossary.command("get")
@_tenant
@_pair_opt
@_name
@click.pass_obj
def get(settings: Settings, tenant: str, pair: str, name: str) -> None:
    """Print the glossary as TSV (version in a comment line)."""
    stored = _run(lambda: _store(settings).get(tenant, _pair(pair), name))
    if stored is None:
        raise click.ClickException(f"no glossary {name!r} for tenant {tenant!r} and pair {pair}")
    click.echo(f"# version {stored.version}")
    for term in stored.terms:
        click.echo(term.source if term.target is None else f"{term.source}\t{term.target}")


@glossary.command("delete")
@_tenant
@_pair_opt
@_name
@click.pass_obj
def delete(settings: Settings, tenant: str, pair: str, name: str) -> None:
    """Remove the glossary; requests that name it then fail with glossary_not_found."""
    if not _run(lambda: _store(settings).delete(tenant, _pair(pair), name)):
        raise click.ClickException(f"no glossary {name!r} for tenant {tenant!r} and pair {pair}")
    click.echo(f"deleted {tenant}/{pair}/{name}")
