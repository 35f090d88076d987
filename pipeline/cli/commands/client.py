"""``babelstream submit``, ``translate`` and ``results``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from pipeline.cli.commands.options import (
    DOMAIN_HELP,
    DURATION,
    INSTANT,
    LABEL,
    LANGUAGE,
    SOURCE_LANGUAGE,
    TENANT_HELP,
)
from pipeline.cli.durations import utc_iso
from pipeline.client import (
    ReplyBatch,
    RequestOptions,
    TranslationClient,
    build_requests,
    check_sendable,
    fetch_results,
)
from pipeline.contract.messages import TextFormat
from pipeline.contract.pairs import (
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    Pair,
    default_reply_topic,
    work_topic,
)
from pipeline.engine.registry import Registry
from pipeline.fidelity.prepare import FORMATS as TEXT_FORMATS
from pipeline.kafka.reachability import require_kafka
from pipeline.settings import LimitSettings, Settings

_TEXT_FILE = click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)


def _lines(file: Path, param_hint: str) -> list[str]:
    try:
        content = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})", param_hint=param_hint
        ) from None
    return content.splitlines()


def _texts(texts: tuple[str, ...], file: Path | None) -> list[str]:
    lines = list(texts)
    if file is not None:
        lines.extend(_lines(file, "'--file'"))
    if not lines:
        raise click.UsageError("give TEXT arguments or --file")
    return lines


def _check_timeout_ms(timeout_ms: int, limits: LimitSettings, param_hint: str, shown: str) -> None:
    """Refuse a deadline the router would dead-letter (``limits.min/max_timeout_ms``)."""
    if not limits.min_timeout_ms <= timeout_ms <= limits.max_timeout_ms:
        raise click.BadParameter(
            f"{shown} is outside the allowed {limits.min_timeout_ms}..{limits.max_timeout_ms} ms "
            "(BABELSTREAM_LIMITS__MIN_TIMEOUT_MS, __MAX_TIMEOUT_MS)",
            param_hint=param_hint,
        )


def _request_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option(
                "--src",
                required=True,
                type=SOURCE_LANGUAGE,
                help="Source language (BCP-47, e.g. en), or auto: detected by the router.",
            ),
            click.option(
                "--tgt",
                required=True,
                type=LANGUAGE,
                help="Target language (BCP-47, e.g. de, en-XA).",
            ),
            click.option(
                "--file", type=_TEXT_FILE, help="UTF-8 file with one text per line ('-' for stdin)."
            ),
            click.option("--tenant", type=LABEL, default=None, help=TENANT_HELP),
            click.option("--domain", type=LABEL, default=None, help=DOMAIN_HELP),
            click.option(
                "--text-format",
                type=click.Choice(TEXT_FORMATS),
                default="text",
                show_default=True,
                help="How each text is parsed: markup (html, xml, markdown) and placeholders "
                "are kept, the text between them translated.",
            ),
            click.option(
                "--glossary",
                default=None,
                help="A stored glossary of the tenant (the default tenant without --tenant) for "
                "this pair (see `glossary put`).",
            ),
            click.option(
                "--term",
                "terms",
                multiple=True,
                callback=_parse_terms,
                metavar="SOURCE[=TARGET]",
                help="An inline glossary term (repeatable); without =TARGET the term is "
                "never translated. Inline terms win over the glossary's.",
            ),
            click.argument("texts", nargs=-1),
        ]
    ):
        f = option(f)
    return f


def _parse_terms(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str | None], ...]:
    terms: list[tuple[str, str | None]] = []
    for value in values:
        source, sep, target = value.partition("=")
        if not source.strip() or (sep and not target.strip()):
            raise click.BadParameter(
                f"{value!r}: give SOURCE=TARGET, or SOURCE alone to keep it untranslated",
                param_hint="'--term'",
            )
        terms.append((source.strip(), target.strip() if sep else None))
    return tuple(terms)


def _options(
    timeout_ms: int | None,
    tenant: str | None,
    domain: str | None,
    text_format: TextFormat,
    glossary: str | None,
    terms: tuple[tuple[str, str | None], ...],
) -> RequestOptions:
    """The request fields the shared options give (plain text sends no ``format``)."""
    return RequestOptions(
        timeout_ms=timeout_ms,
        tenant=tenant,
        domain=domain,
        text_format=None if text_format == "text" else text_format,
        glossary=glossary,
        terms=terms,
    )


def _print_results(
    request_ids: Sequence[str], replies: ReplyBatch, as_json: bool, missing: Callable[[str], str]
) -> None:
    """One line per request, in order: the translation (stdout) or what went wrong (stderr)."""
    for request_id in request_ids:
        result = replies.results.get(request_id)
        if result is None:
            click.echo(missing(request_id), err=True)
        elif as_json:
            click.echo(result.to_json().decode())
        elif result.status == "ok":
            click.echo(result.translation)
        else:
            detail = f"{result.reason}: " if result.reason else ""
            click.echo(f"[{result.status}] {detail}{result.error or ''}".rstrip(), err=True)


def no_result_hint(settings: Settings, pair: Pair) -> str:
    """Why results may not come, from consumer-group membership of the pair's topics."""
    from pipeline.kafka.groups import consumer_groups, serving

    if settings.tenants.client_tenant is not None:
        # a tenant's user may see no consumer group: what it would list says nothing
        return (
            "busy, or no worker reads tenants' ingress topics (ask the operator: workers "
            "need tenants.identity_from_topic); fetch the results later with "
            "`babelstream results ID...`"
        )
    try:
        groups = consumer_groups(settings.kafka, with_lag=False)
    except Exception as exc:  # a hint only: never hide the timeout behind a second error
        return f"(could not list the workers: {exc})"
    if not serving(groups, REQUESTS_TOPIC):
        return (
            f"no worker routes {REQUESTS_TOPIC}: start one with `babelstream worker` "
            "(see `babelstream status`)"
        )
    model = Registry.load(settings.engine.registry).model_for(pair)
    if model is None:
        return (
            f"no model serves {pair.id}: add one to {settings.engine.registry} "
            f"(`babelstream models add argos --pair {pair.id}`)"
        )
    workers = serving(groups, work_topic(model.model_id))
    if not workers:
        return (
            f"no worker serves {pair.id} (model {model.model_id}): start one with "
            f"`babelstream worker --models {model.model_id} --no-router`"
        )
    names = ", ".join(f"{g.group_id} ({len(g.members)} members)" for g in workers)
    return (
        f"{pair.id} is served by {names}: busy or still starting? try a longer --timeout, "
        "or fetch the results later with `babelstream results ID...`"
    )


@click.command()
@_request_options
@click.option(
    "--timeout",
    type=DURATION,
    default=None,
    help="Each request's deadline, relative to submission, e.g. 30s "
    "[default: limits.default_timeout_ms].",
)
# the spelling before --timeout, kept for scripts
@click.option(
    "--timeout-ms", type=int, default=None, hidden=True, help="--timeout in milliseconds."
)
@click.pass_obj
def submit(
    settings: Settings,
    src: str,
    tgt: str,
    file: Path | None,
    tenant: str | None,
    domain: str | None,
    text_format: TextFormat,
    glossary: str | None,
    terms: tuple[tuple[str, str | None], ...],
    texts: tuple[str, ...],
    timeout: float | None,
    timeout_ms: int | None,
) -> None:
    """Publish translation requests; print their request ids (one per line).

    Fetch their results later with `babelstream results ID...`.
    """
    if timeout is not None and timeout_ms is not None:
        raise click.UsageError("give --timeout or --timeout-ms, not both")
    if timeout is not None:
        timeout_ms = round(timeout * 1000)
        _check_timeout_ms(timeout_ms, settings.limits, "'--timeout'", f"{timeout:g} s")
    elif timeout_ms is not None:
        _check_timeout_ms(timeout_ms, settings.limits, "'--timeout-ms'", f"{timeout_ms} ms")
    options = _options(timeout_ms, tenant, domain, text_format, glossary, terms)
    requests = build_requests(_texts(texts, file), Pair(src, tgt), options)
    check_sendable(requests, settings.limits)
    require_kafka(settings.kafka)
    with TranslationClient(
        settings.kafka, settings.limits, tenant=settings.tenants.client_tenant
    ) as client:
        for request_id in client.submit(requests):
            click.echo(request_id)


@click.command()
@_request_options
@click.option("--json", "as_json", is_flag=True, help="One TranslationResult JSON per line.")
@click.option(
    "--timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    help="How long to wait (e.g. 10s, 2m; bare numbers are seconds); also each request's deadline.",
)
@click.option(
    "--reply-topic",
    default=None,
    help="Read results from this topic of your own (created if missing, kept) "
    "[default: a fresh topic for this call, deleted afterwards].",
)
@click.pass_obj
def translate(
    settings: Settings,
    src: str,
    tgt: str,
    file: Path | None,
    tenant: str | None,
    domain: str | None,
    text_format: TextFormat,
    glossary: str | None,
    terms: tuple[tuple[str, str | None], ...],
    texts: tuple[str, ...],
    as_json: bool,
    timeout: float,
    reply_topic: str | None,
) -> None:
    """Translate texts through the pipeline and print the results.

    Results come back on a reply topic of this call's own, never by scanning
    the shared results topic. Exits 1 when any request failed, timed out, or
    got no result in time.
    """
    timeout_ms = round(timeout * 1000)
    _check_timeout_ms(timeout_ms, settings.limits, "'--timeout'", f"{timeout:g} s")
    pair = Pair(src, tgt)
    options = _options(timeout_ms, tenant, domain, text_format, glossary, terms)
    requests = build_requests(_texts(texts, file), pair, options)
    check_sendable(requests, settings.limits)
    require_kafka(settings.kafka)
    with TranslationClient(
        settings.kafka,
        settings.limits,
        replies=settings.replies,
        reply_topic=reply_topic,
        tenant=settings.tenants.client_tenant,
    ) as client:
        replies = client.translate(requests, timeout_s=timeout)
    _print_results(
        [r.request_id for r in requests],
        replies,
        as_json,
        lambda rid: f"no result for {rid} within {timeout:g}s",
    )
    if replies.missing:
        click.echo(no_result_hint(settings, pair), err=True)
    sys.exit(0 if replies.all_ok else 1)


@click.command()
@click.argument("request_ids", nargs=-1)
@click.option(
    "--file",
    type=_TEXT_FILE,
    help="File with one request id per line ('-' for stdin, e.g. piped from submit).",
)
@click.option(
    "--since",
    type=INSTANT,
    default="1h",
    show_default=True,
    help="Scan results written since: a duration back (10m, 2h), ISO 8601, epoch ms or "
    "now-<duration> (as `dlq list --since`).",
)
@click.option(
    "--wait",
    type=DURATION,
    default="0s",
    show_default=True,
    help="Then keep reading this long for results not there yet.",
)
@click.option("--json", "as_json", is_flag=True, help="One TranslationResult JSON per line.")
@click.pass_obj
def results(
    settings: Settings,
    request_ids: tuple[str, ...],
    file: Path | None,
    since: int,
    wait: float,
    as_json: bool,
) -> None:
    """Print the results of requests sent with `submit`, in the order of REQUEST_IDS.

    Reads translate.results (a tenant's client, tenants.client_tenant: its
    default reply topic) from the first record written --since up to the
    topic's end when the command started, then --wait longer for ids still
    missing. The first result of an id wins (delivery is at-least-once).
    Exits 1 when any request has no result or did not end ok.
    """
    ids = [*request_ids, *(line.strip() for line in (_lines(file, "'--file'") if file else []))]
    ids = [i for i in ids if i]
    if not ids:
        raise click.UsageError("give REQUEST_IDS arguments or --file")
    require_kafka(settings.kafka)
    tenant = settings.tenants.client_tenant
    topic = (
        RESULTS_TOPIC if tenant is None else default_reply_topic(settings.replies.prefix, tenant)
    )
    replies = fetch_results(settings.kafka, ids, since_ms=since, wait_s=wait, topic=topic)
    _print_results(
        ids, replies, as_json, lambda rid: f"no result for {rid} written since {utc_iso(since)}"
    )
    sys.exit(0 if replies.all_ok else 1)
