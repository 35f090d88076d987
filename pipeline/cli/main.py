"""The ``babelstream`` command line.

Sub-commands live in ``pipeline/cli/commands/`` and are imported only when used,
so ``babelstream --help`` stays fast and heavy imports (pyspark, ctranslate2)
happen only for the commands that need them.

Errors: every mistake a user can make (bad option, bad input, bad setting)
and every service that does not answer ends the command with one line on
stderr and an exit code (2: usage or input, 69: a service is unreachable,
1: anything else the project raises on purpose); ``--verbose`` adds the
traceback. Exceptions nobody expected keep their traceback: they are bugs.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from pipeline.errors import BabelStreamError
from pipeline.settings import Settings, settings_from_environment

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "up": "pipeline.cli.commands.stack:up",
    "down": "pipeline.cli.commands.stack:down",
    "status": "pipeline.cli.commands.stack:status",
    "submit": "pipeline.cli.commands.client:submit",
    "translate": "pipeline.cli.commands.client:translate",
    "results": "pipeline.cli.commands.client:results",
    "worker": "pipeline.cli.commands.worker:worker",
    "models": "pipeline.cli.commands.models:models",
    "bench": "pipeline.cli.commands.bench:bench",
    "schemas": "pipeline.cli.commands.schemas:schemas",
    "bulk": "pipeline.cli.commands.bulk:bulk",
    "sla": "pipeline.cli.commands.sla:sla",
    "dashboard": "pipeline.cli.commands.dashboard:dashboard",
    "cancel": "pipeline.cli.commands.cancel:cancel",
    "dlq": "pipeline.cli.commands.dlq:dlq",
    "drill": "pipeline.cli.commands.drill:drill",
    "spark": "pipeline.cli.commands.spark:spark",
    "glossary": "pipeline.cli.commands.glossary:glossary",
    "topics": "pipeline.cli.commands.topics:topics",
    "gateway": "pipeline.cli.commands.gateway:gateway",
    "keys": "pipeline.cli.commands.keys:keys",
    "tenants": "pipeline.cli.commands.tenants:tenants",
}


class LazyGroup(click.Group):
    """A click group that imports each sub-command on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, name)


class Failure(click.ClickException):
    """A project error on its way out: one line, the error's own exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def as_failure(exc: Exception, settings: Settings | None) -> Failure | None:
    """The one-line form of an error the project expects, or None for a bug."""
    from pipeline.kafka.reachability import as_unavailable

    if isinstance(exc, BabelStreamError):
        return Failure(str(exc), exc.exit_code)
    unavailable = as_unavailable(exc, settings.kafka if settings is not None else None)
    if unavailable is not None:
        return Failure(str(unavailable), unavailable.exit_code)
    return None


def _verbose(args: Sequence[str]) -> bool:
    """Whether the root options (those before the sub-command) ask for ``--verbose``."""
    for arg in args:
        if not arg.startswith("-"):
            return False
        if arg == "--verbose" or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            return True
    return False


class BabelStreamCli(LazyGroup):
    """The root group: one-line errors for users, tracebacks only with ``--verbose``."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except Exception as exc:
            failure = as_failure(exc, ctx.obj if isinstance(ctx.obj, Settings) else None)
            if failure is None:
                raise
            raise failure from exc

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if _verbose(argv) and exc.__cause__ is not None:
                traceback.print_exception(exc.__cause__)
            click.echo(f"Error: {_one_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def _one_line(exc: click.ClickException) -> str:
    message = exc.format_message()
    # one hint: a message that names where to look already says more than --help
    if isinstance(exc, click.UsageError) and exc.ctx is not None and "(see " not in message:
        message += f" (see '{exc.ctx.command_path} --help')"
    return message


@click.group(cls=BabelStreamCli, lazy=COMMANDS)
@click.option(
    "-v", "--verbose", count=True, help="More logging (-v info, -vv debug); tracebacks with errors."
)
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Babel Stream: streaming translation on Kafka, Faust and CTranslate2."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = settings_from_environment()
    # Traces: OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, console/file by setting.
    from pipeline.observability.tracing import setup_tracing

    setup_tracing(ctx.obj.observability)
