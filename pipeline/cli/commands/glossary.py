"""``babelstream glossary put|list|get|delete``: per-tenant glossaries in Redis."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
import redis

from pipeline.contract.messages import DEFAULT_TENANT
from pipeline.contract.pairs import Pair
from pipeline.engine.registry import Registry
from pipeline.errors import ContractError, ServiceUnavailable
from pipeline.fidelity.glossary_store import (
    GlossaryError,
    GlossaryStore,
    StoredGlossary,
    read_terms,
)
from pipeline.settings import Settings

T = TypeVar("T")


def _store(settings: Settings) -> GlossaryStore:
    return GlossaryStore(settings.redis)


def _parsed_pair(value: str) -> Pair:
    try:
        return Pair.parse(value)
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None


def _pair(value: str) -> str:
    return _parsed_pair(value).id


def _served_pair(settings: Settings, value: str) -> str:
    """A pair id some model of the registry serves (a glossary of another pair is never used)."""
    pair = _parsed_pair(value)
    registry = Registry.load(settings.engine.registry)
    if registry.model_for(pair) is None:
        raise click.BadParameter(
            f"no model serves {pair.id} in {registry.path} ({registry.describe()}); add one "
            f"with `babelstream models add argos --pair {pair.id}` first",
            param_hint="--pair",
        )
    return pair.id


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
    """Run ``action``; Redis not answering is a service that is not there (exit 69)."""
    try:
        return action()
    except redis.RedisError as exc:
        raise ServiceUnavailable(
            f"cannot reach Redis ({exc}); start the local stack with `babelstream up`, "
            "or set BABELSTREAM_REDIS__URL to your Redis"
        ) from None


def _missing(tenant: str, pair: str, name: str) -> GlossaryError:
    return GlossaryError(
        f"no glossary {name!r} for tenant {tenant!r} and pair {pair}; "
        f"`babelstream glossary list --tenant {tenant}` lists them"
    )


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
    pair_id = _served_pair(settings, pair)
    terms = read_terms(file, settings.fidelity.max_terms)
    stored = _run(lambda: _store(settings).put(tenant, pair_id, name, terms))
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
        raise _missing(tenant, pair, name)
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
        raise _missing(tenant, pair, name)
    click.echo(f"deleted {tenant}/{pair}/{name}")
