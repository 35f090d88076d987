"""Exception roots: every error the library raises on purpose derives from these.

Each class carries the exit code the ``babelstream`` command line ends with
when the error reaches it (``pipeline.cli.main`` prints one line, no traceback
unless ``--verbose``).
"""

from typing import ClassVar

# Exit codes of the command line (docs/troubleshooting.md, "Errors and exit codes").
EXIT_FAILED = 1  # a command or a request failed
EXIT_USAGE = 2  # a mistake in the command line, the input or the settings (click's own code)
EXIT_UNAVAILABLE = 69  # a service (Kafka, Spark master) cannot be reached (sysexits EX_UNAVAILABLE)
# the worker gave up on transient faults (retry budget) or outlasted its stop bound; nothing
# was committed past unfinished work, so an orchestrator just restarts it (EX_TEMPFAIL)
EXIT_TEMPFAIL = 75


class BabelStreamError(Exception):
    """Root of all Babel Stream errors."""

    exit_code: ClassVar[int] = EXIT_FAILED


class ConfigError(BabelStreamError):
    """Settings, registry or model configuration is wrong."""

    exit_code = EXIT_USAGE


class ContractError(BabelStreamError):
    """A message breaks the wire contract (see ``schemas/``)."""

    exit_code = EXIT_USAGE


class LimitExceeded(ContractError):
    """A request is valid by the schema but breaks a deployment limit (``LimitSettings``)."""


class StackError(BabelStreamError):
    """The local dev stack could not be started, stopped or checked."""


class StackSettingsError(StackError):
    """The stack as asked for cannot start: a port taken, a layout that does not fit (a
    usage mistake)."""

    exit_code = EXIT_USAGE


class ServiceUnavailable(BabelStreamError):
    """A service the command needs (Kafka, a Spark master) does not answer."""

    exit_code = EXIT_UNAVAILABLE


class ModelSourceError(ConfigError):
    """A model source cannot be imported as it is: a corrupt archive, a checksum that does
    not match, no pair in its metadata, a pair the index does not list, a model that does
    not load. Nothing was registered."""


class EngineError(BabelStreamError):
    """The translation engine failed."""


def missing_extra(module: str, extra: str) -> ImportError:
    """An ImportError that names the extra to install, for heavy optional imports."""
    return ImportError(
        f"{module} is not installed; install it with `pip install 'babelstream[{extra}]'`"
    )
