"""Start and stop a ``babelstream worker`` subprocess (demo, benchmarks, tests)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from tqdm import tqdm

from pipeline.client import TranslationClient, build_requests
from pipeline.pairs import Pair
from pipeline.settings import Settings

log = logging.getLogger(__name__)

DEMO_PAIR = Pair("en", "en-XA")


class WorkerProcess:
    """One worker process; ready once a probe request gets its result back."""

    def __init__(
        self,
        settings: Settings,
        *,
        log_path: Path,
        pairs: list[str] | None = None,
        env: dict[str, str] | None = None,
        probe_pair: Pair = DEMO_PAIR,
    ) -> None:
        self._settings = settings
        self._log_path = log_path
        self._pairs = pairs
        self._env = {**os.environ, **(env or {})}
        self._probe_pair = probe_pair
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout_s: float = 180.0) -> WorkerProcess:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pipeline", "worker"]
        if self._pairs:
            command += ["--pairs", ",".join(self._pairs)]
        with self._log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=self._env,
                start_new_session=True,
            )
        self._wait_ready(ready_timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with TranslationClient(self._settings.kafka) as client, tqdm(
            desc="waiting for worker", unit="probe", leave=False, disable=None
        ) as progress:
            while time.monotonic() < deadline:
                if self._proc is not None and self._proc.poll() is not None:
                    raise RuntimeError(
                        f"worker exited with {self._proc.returncode}; see {self._log_path}"
                    )
                probe = build_requests(["ready?"], self._probe_pair)
                if client.translate(probe, timeout_s=5).results:
                    return
                progress.update()
        raise TimeoutError(f"worker not ready after {timeout_s}s; see {self._log_path}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Graceful stop (SIGTERM), then SIGKILL if it hangs."""
        self._signal(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """Crash it: no graceful shutdown, no final commit."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, timeout_s: float) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, sig)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("worker %s did not stop in %ss; killing it", self._proc.pid, timeout_s)
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
