"""Click pieces several commands share: parameter types, checks before the work starts."""

from __future__ import annotations

import re
from typing import Any

import click

from pipeline.cli.durations import parse_duration, parse_instant
from pipeline.contract.messages import AUTO_LANGUAGE, BCP47_PATTERN, now_ms
from pipeline.errors import ConfigError

_BCP47 = re.compile(BCP47_PATTERN)


class LanguageTag(click.ParamType):
    """A BCP-47 language tag (``en``, ``de``, ``zh-Hans``, ``en-XA``), as the contract wants;
    with ``auto`` also ``auto`` (a source language the router detects)."""

    name = "LANG"

    def __init__(self, auto: bool = False) -> None:
        self._auto = auto

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if self._auto and text == AUTO_LANGUAGE:
            return text
        if not _BCP47.match(text) or len(text) > 35:
            self.fail(
                f"{text!r} is not a BCP-47 language tag (e.g. en, de, zh-Hans, en-XA)", param, ctx
            )
        return text


LANGUAGE = LanguageTag()
SOURCE_LANGUAGE = LanguageTag(auto=True)


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


class Duration(click.ParamType):
    """A duration (:func:`pipeline.cli.durations.parse_duration`: bare numbers are seconds; ms, s,
    m, h, d), in seconds, with an optional lower bound (``min_open``: the bound itself is
    refused); values not given as text are seconds already."""

    name = "duration"

    def __init__(self, min_s: float | None = None, *, min_open: bool = False) -> None:
        self._min_s = min_s
        self._min_open = min_open

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value) if isinstance(value, int | float) else parse_duration(value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)
        if self._min_s is not None and (
            seconds <= self._min_s if self._min_open else seconds < self._min_s
        ):
            bound = "more than" if self._min_open else "at least"
            self.fail(f"{value!r} is too short: give {bound} {self._min_s:g}s", param, ctx)
        return seconds


class Instant(click.ParamType):
    """A time (:func:`pipeline.cli.durations.parse_instant`), as epoch ms."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_instant(str(value), now_ms())
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()
INSTANT = Instant()


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
