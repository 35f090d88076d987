"""``babelstream gateway``: the LibreTranslate-compatible HTTP API onto the Kafka path."""

from __future__ import annotations

import click

from pipeline.settings import Settings


@click.command()
@click.option("--host", default=None, help="Interface to bind [default: gateway.host].")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port [default: gateway.port, 5000].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Server processes, each with its own producer and reply topic [default: gateway.workers].",
)
@click.pass_obj
def gateway(settings: Settings, host: str | None, port: int | None, workers: int | None) -> None:
    """Serve LibreTranslate's HTTP API: every call goes through translate.requests.

    Mastodon, Discourse, Weblate and LibreTranslate's client libraries work
    unchanged; see docs/guides/gateway.md.
    """
    from pipeline.gateway.server import bind, serve

    overrides = {
        k: v for k, v in {"host": host, "port": port, "workers": workers}.items() if v is not None
    }
    settings = settings.model_copy(
        update={"gateway": settings.gateway.model_copy(update=overrides)}
    )
    g = settings.gateway
    try:
        sock = bind(g.host, g.port)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {g.host}:{g.port} ({exc.strerror or exc}); choose another "
            "--port (or BABELSTREAM_GATEWAY__PORT)",
            param_hint="'--port'",
        ) from exc
    bound_port = sock.getsockname()[1]
    if g.port == 0:  # a free port was asked for: say which
        settings = settings.model_copy(
            update={"gateway": g.model_copy(update={"port": bound_port})}
        )
    click.echo(
        f"gateway: serving http://{g.host}:{bound_port} ({g.workers} process"
        f"{'es' if g.workers > 1 else ''}); spec at /spec, docs at /docs",
        err=True,
    )
    serve(settings, sock)
