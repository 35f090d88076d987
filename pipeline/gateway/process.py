"""Start and stop a ``babelstream gateway`` subprocess (benches, tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from pipeline.errors import BabelStreamError
from pipeline.settings import Settings
from pipeline.stack.local_worker import free_port


class GatewayNotReady(BabelStreamError):
    """The gateway exited, or did not connect to Kafka within the bound."""


class GatewayProcess:
    """One gateway on a free port; ready once every one of its processes
    (``gateway.workers``) says Kafka is available."""

    def __init__(
        self, settings: Settings, *, log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port(settings.gateway.host)
        self.host = settings.gateway.host
        self._log_path = log_path
        self._env = {
            **os.environ,
            "BABELSTREAM_GATEWAY__PORT": str(self.port),
            **(env or {}),
        }
        self._proc: subprocess.Popen[bytes] | None = None
        workers = self._env.get("BABELSTREAM_GATEWAY__WORKERS")
        self.processes = int(workers) if workers else settings.gateway.workers

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def status(self) -> dict[str, Any] | None:
        """The process's ``/babelstream/gateway`` page, or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/babelstream/gateway", timeout=2) as answer:
                return dict(json.load(answer))
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def start(self, timeout_s: float = 60.0, *, wait_kafka: bool = True) -> GatewayProcess:
        """Start it; ready when it answers (and, with ``wait_kafka``, when each of its
        processes has connected to Kafka: a call reaching one still connecting is a 503)."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "gateway"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        connected: set[int] = set()
        while not self._ready(wait_kafka, connected):
            if self._proc.poll() is not None:
                raise GatewayNotReady(
                    f"gateway exited with {self._proc.returncode}; see {self._log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise GatewayNotReady(
                    f"gateway not connected after {timeout_s:.0f}s; see {self._log_path}"
                )
            time.sleep(0.2)
        return self

    def _ready(self, wait_kafka: bool, connected: set[int]) -> bool:
        """Whether it answers (with ``wait_kafka``: whether every process has said Kafka
        is available; ``connected`` collects those that did, as calls reach one at a time)."""
        status = self.status()
        if status is None:
            return False
        if not wait_kafka:
            return True
        if status.get("kafka") != "available":
            return False
        if "process" not in status:
            return True  # a key-required gateway shows its processes to keys only
        connected.add(int(status["process"]))
        return len(connected) >= self.processes

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it hangs."""
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def kill(self) -> None:
        """Crash it (no shutdown at all)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def __enter__(self) -> GatewayProcess:
        return self if self._proc is not None and self._proc.poll() is None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
