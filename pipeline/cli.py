"""The ``babelstream`` command line.

Sub-commands live in ``pipeline/commands/`` and are imported only when used,
so ``babelstream --help`` stays fast and heavy imports (pyspark, ctranslate2)
happen only for the commands that need them.
"""

from __future__ import annotations

import importlib
import logging

import click

from pipeline.settings import load_settings

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "up": "pipeline.commands.stack:up",
    "down": "pipeline.commands.stack:down",
    "status": "pipeline.commands.stack:status",
    "submit": "pipeline.commands.client:submit",
    "translate": "pipeline.commands.client:translate",
    "worker": "pipeline.commands.worker:worker",
    "models": "pipeline.commands.models:models",
    "bench": "pipeline.commands.bench:bench",
    "schemas": "pipeline.commands.schemas:schemas",
    "bulk": "pipeline.commands.bulk:bulk",
    "sla": "pipeline.commands.sla:sla",
    "dashboard": "pipeline.commands.dashboard:dashboard",
    "spark": "pipeline.commands.spark:spark",
}


class LazyGroup(click.Group):
    """A click group that imports each sub-command on first use."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Babel Stream: streaming translation on Kafka, Faust and CTranslate2."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = load_settings()
    # Traces: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, console/file by setting.
    from pipeline.tracing import setup_tracing

    setup_tracing(ctx.obj.observability)
