"""Exception roots: every error the library raises on purpose derives from these."""


class BabelStreamError(Exception):
    """Root of all Babel Stream errors."""


class ConfigError(BabelStreamError):
    """Settings, registry or model configuration is wrong."""


class ContractError(BabelStreamError):
    """A message breaks the wire contract (see ``schemas/``)."""


class StackError(BabelStreamError):
    """The local dev stack could not be started, stopped or checked."""


class EngineError(BabelStreamError):
    """The translation engine failed."""


def missing_extra(module: str, extra: str) -> ImportError:
    """An ImportError that names the extra to install, for heavy optional imports."""
    return ImportError(
        f"{module} is not installed; install it with `pip install 'babelstream[{extra}]'`"
    )
