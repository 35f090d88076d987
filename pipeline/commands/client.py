"""``babelstream submit`` and ``babelstream translate``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.client import RequestOptions, TranslationClient, build_requests
from pipeline.pairs import Pair
from pipeline.settings import Settings


def _texts(texts: tuple[str, ...], file: Path | None, whole: bool = False) -> list[str]:
    """TEXT arguments, then the file: one text per line, or (``whole``) one document."""
    lines = list(texts)
    if file is not None:
        content = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        lines.extend([content] if whole else content.splitlines())
    if not lines:
        raise click.UsageError("give TEXT arguments or --file")
    return lines


def _request_options(f):  # type: ignore[no-untyped-def]
    for option in reversed(
        [
            click.option("--src", required=True, help="Source language (BCP-47)."),
            click.option("--tgt", required=True, help="Target language (BCP-47)."),
            click.option(
                "--file", type=click.Path(path_type=Path, allow_dash=True),
                help="One text per line ('-' for stdin).",
            ),
            click.option("--tenant", default=None),
            click.option("--domain", default=None),
            click.option(
                "--text-format", type=click.Choice(["text", "html", "xml", "markdown"]),
                default="text", show_default=True,
                help="Markup formats keep their markup; --file is then one document.",
            ),
            click.option("--glossary", default=None, help="A stored glossary of the tenant."),
            click.option(
                "--term", "terms", multiple=True, metavar="SOURCE[=TARGET]",
                help="An inline term (no target: do not translate); repeatable.",
            ),
            click.argument("texts", nargs=-1),
        ]
    ):
        f = option(f)
    return f


def _options(
    timeout_ms: int | None, tenant: str | None, domain: str | None, text_format: str,
    glossary: str | None, terms: tuple[str, ...],
) -> RequestOptions:
    pairs = tuple((s, t or None) for s, _, t in (term.partition("=") for term in terms))
    return RequestOptions(
        timeout_ms=timeout_ms, tenant=tenant, domain=domain,
        text_format=None if text_format == "text" else text_format,  # type: ignore[arg-type]
        glossary=glossary, terms=pairs,
    )


@click.command()
@_request_options
@click.option("--timeout-ms", type=int, default=None, help="Deadline relative to submission.")
@click.pass_obj
def submit(
    settings: Settings, src: str, tgt: str, file: Path | None, tenant: str | None,
    domain: str | None, text_format: str, glossary: str | None, terms: tuple[str, ...],
    texts: tuple[str, ...], timeout_ms: int | None,
) -> None:
    """Publish translation requests; print their request ids."""
    options = _options(timeout_ms, tenant, domain, text_format, glossary, terms)
    requests = build_requests(_texts(texts, file, text_format != "text"), Pair(src, tgt), options)
    with TranslationClient(settings.kafka) as client:
        for request_id in client.submit(requests):
            click.echo(request_id)


@click.command()
@_request_options
@click.option("--json", "as_json", is_flag=True, help="One TranslationResult JSON per line.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
@click.pass_obj
def translate(
    settings: Settings, src: str, tgt: str, file: Path | None, tenant: str | None,
    domain: str | None, text_format: str, glossary: str | None, terms: tuple[str, ...],
    texts: tuple[str, ...], as_json: bool, timeout: float,
) -> None:
    """Translate texts through the pipeline and print the results.

    Exits 1 when any request failed, timed out, or got no result in time.
    """
    options = _options(int(timeout * 1000), tenant, domain, text_format, glossary, terms)
    requests = build_requests(_texts(texts, file, text_format != "text"), Pair(src, tgt), options)
    with TranslationClient(settings.kafka) as client:
        replies = client.translate(requests, timeout_s=timeout)
    for request, result in zip(requests, replies.ordered, strict=True):
        if result is None:
            click.echo(f"no result for {request.request_id} within {timeout}s", err=True)
        elif as_json:
            click.echo(result.to_json().decode())
        elif result.status == "ok":
            click.echo(result.translation)
        else:
            click.echo(f"[{result.status}] {result.error or ''}".rstrip(), err=True)
    sys.exit(0 if replies.all_ok else 1)
