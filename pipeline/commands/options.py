"""Click pieces several commands share: parameter types, checks before the work starts."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from pipeline.errors import ConfigError
from pipeline.messages import BCP47_PATTERN, now_ms
from pipeline.sla import parse_duration, parse_instant

_BCP47 = re.compile(BCP47_PATTERN)


class LanguageTag(click.ParamType):
    """A BCP-47 language tag (``en``, ``de``, ``zh-Hans``, ``en-XA``), as the contract wants."""

    name = "LANG"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not _BCP47.match(text) or len(text) > 35:
            self.fail(
                f"{text!r} is not a BCP-47 language tag (e.g. en, de, zh-Hans, en-XA)", param, ctx
            )
        return text


LANGUAGE = LanguageTag()


class Label(click.ParamType):
    """A tenant or domain label: 1 to 64 characters (the contract's ``ShortLabel``)."""

    name = "LABEL"
    max_length = 64

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not 1 <= len(text) <= self.max_length:
            self.fail(f"must be 1 to {self.max_length} characters, got {len(text)}", param, ctx)
        return text


LABEL = Label()
TENANT_HELP = "Tenant label: caches and dedup never share entries across tenants."
DOMAIN_HELP = "Domain label (e.g. legal, medical); part of the cache key."


class Parsed(click.ParamType):
    """An option value read by a parser that raises ConfigError (values not given as text
    are taken as already parsed)."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


# a duration such as 500ms, 5s, 1m, 2h or 30d, in seconds
DURATION = Parsed("duration", parse_duration)
# a point in time: ISO 8601 (UTC unless it says otherwise), epoch ms, or now-30d; epoch ms
INSTANT = Parsed("time", lambda text: parse_instant(text, now_ms()))


def refuse_router_contradiction(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Callback of ``worker``'s ``--router/--no-router`` and ``--router-only``:
    ``--router-only --no-router`` asks for a worker that does nothing."""
    given = {**ctx.params, str(param.name): value}
    if given.get("router_only") and given.get("router") is False:
        raise click.BadParameter(
            "--router-only and --no-router contradict each other: "
            "--router-only runs only the router, --no-router runs none",
            ctx=ctx,
            param_hint="'--router-only' / '--no-router'",
        )
    return value
