"""What the manager needs from each service of the stack."""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from pipeline.observability.progress import Reporter
from pipeline.settings import Settings
from pipeline.stack.procs import PidFile


@dataclass(frozen=True, slots=True)
class Probe:
    """Result of one health check."""

    healthy: bool
    version: str | None = None
    detail: str = ""


class Service(ABC):
    """A process the stack starts, checks and stops."""

    name: str

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.stack.home

    @property
    @abstractmethod
    def host(self) -> str: ...

    @property
    @abstractmethod
    def port(self) -> int: ...

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pidfile(self) -> PidFile:
        return PidFile(self.home / "run" / f"{self.name}.pid")

    @property
    def log_path(self) -> Path:
        return self.home / "log" / f"{self.name}.log"

    @property
    def workdir(self) -> Path:
        return self.home / self.name

    @abstractmethod
    def prepare(self, report: Reporter) -> None:
        """Fetch / install binaries, write config, initialise data (idempotent)."""

    @abstractmethod
    def command(self) -> list[str]:
        """The command line that runs the service in the foreground."""

    @property
    @abstractmethod
    def marker(self) -> str:
        """A string our process's command line always contains."""

    @abstractmethod
    def probe(self, pid: int | None) -> Probe:
        """Health check; ``pid`` is our process, when we started it."""

    def port_in_use(self) -> bool:
        """True when something accepts connections on the service's port."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((self.host, self.port)) == 0
