"""Start and stop a ``babelstream worker`` subprocess (demo, benchmarks, tests)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tqdm import tqdm

from pipeline.client import TranslationClient, build_requests
from pipeline.contract.pairs import Pair
from pipeline.errors import BabelStreamError
from pipeline.settings import Settings

log = logging.getLogger(__name__)

DEMO_PAIR = Pair("en", "en-XA")
# the model serving the demo pairs (models/registry.toml): it names their work topics
DEMO_MODEL = "babelstream-demo-enxa"


class WorkerNotReady(BabelStreamError):
    """The worker exited, or did not serve within the bound."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class WorkerProcess:
    """One worker process, on its own web and metrics ports.

    Ready once its readiness page answers 200 *and* a probe request comes
    back ``ok`` through the whole path (router, pair topic, engine, result).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        log_path: Path,
        pairs: list[str] | None = None,
        env: dict[str, str] | None = None,
        probe_pair: Pair = DEMO_PAIR,
        instance_id: str | None = None,
        group: int | None = None,
        hold_file: Path | None = None,
        args: Sequence[str] = (),
        probe: bool = True,
    ) -> None:
        """``group``: run the worker with this group id (and no other), e.g. so that a
        firewall rule matching it can cut the worker off (``pipeline/drill/network.py``).
        ``hold_file``: the worker's ``engine.hold_file``, for :meth:`engine_held`.
        ``args``: more options of ``babelstream worker`` (``--router-only``). ``probe``:
        ready once a probe request is translated, not only once its readiness page says
        so (a worker that only routes, or only translates, cannot answer one alone)."""
        self._args = tuple(args)
        self._probe = probe
        self._settings = settings
        self._group = group
        self._log_path = log_path
        self._pairs = pairs
        self._probe_pair = probe_pair
        web_port = str(free_port(settings.worker.web_host))
        self._env = {
            **os.environ,
            "BABELSTREAM_WORKER__WEB_PORT": web_port,
            # stable across restarts of this process object (static membership)
            "BABELSTREAM_WORKER__INSTANCE_ID": instance_id or f"{socket.gethostname()}-{web_port}",
            "BABELSTREAM_OBSERVABILITY__METRICS_PORT": str(free_port()),
            **({"BABELSTREAM_ENGINE__HOLD_FILE": str(hold_file)} if hold_file else {}),
            **(env or {}),
        }
        self._hold_file = hold_file
        self.web_port = int(self._env["BABELSTREAM_WORKER__WEB_PORT"])
        self.metrics_port = int(self._env["BABELSTREAM_OBSERVABILITY__METRICS_PORT"])
        self.instance_id = self._env["BABELSTREAM_WORKER__INSTANCE_ID"]
        self._proc: subprocess.Popen[bytes] | None = None
        # when this worker last got a request (time.monotonic()): the probe, or a bench's
        # load (fair share counts a tenant as active for a while after its last request)
        self.last_request_at: float | None = None

    @property
    def ready_url(self) -> str:
        return f"http://{self._settings.worker.web_host}:{self.web_port}/babelstream/ready"

    def start(self, ready_timeout_s: float = 180.0) -> WorkerProcess:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pipeline", "worker"]
        if self._pairs:
            command += ["--pairs", ",".join(self._pairs)]
        command += self._args
        with self._log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                group=self._group,
                extra_groups=None if self._group is None else [],
            )
        try:
            self.wait_ready(ready_timeout_s)
        except BaseException:
            self.dump_stacks()  # why it never answered, in its log
            self.kill()  # never leave a half-started worker behind in the group
            raise
        return self

    def stats(self) -> dict[str, Any]:
        """The worker's running counters (``/babelstream/stats``)."""
        url = f"http://{self._settings.worker.web_host}:{self.web_port}/babelstream/stats"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def stats_when(
        self, settled: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """The worker's counters once ``settled`` holds of them (or at ``timeout_s``).

        A batch is counted after its results are published, so a client holding
        every result may read counters that miss the last batch for a moment.
        """
        deadline = time.monotonic() + timeout_s
        while not settled(stats := self.stats()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return stats

    def readiness(self) -> dict[str, Any] | None:
        """The readiness page's JSON, or None when it does not answer (yet)."""
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as exc:
            return dict(json.load(exc)) if exc.code == 503 else None
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for the readiness page, then for an ``ok`` probe result."""
        deadline = time.monotonic() + timeout_s
        with tqdm(desc="waiting for worker", unit="check", leave=False, disable=None) as bar:
            while not (self.readiness() or {}).get("ready"):
                self._check_alive()
                if time.monotonic() > deadline:
                    raise WorkerNotReady(
                        f"worker not ready after {timeout_s:.0f}s "
                        f"({self.readiness()}); see {self._log_path}"
                    )
                bar.update()
                time.sleep(0.25)
            if not self._probe:
                return
            with TranslationClient(self._settings.kafka) as client:
                while True:
                    self._check_alive()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise WorkerNotReady(
                            f"no probe result after {timeout_s:.0f}s; see {self._log_path}"
                        )
                    probe = build_requests(["ready?"], self._probe_pair)
                    (result,) = client.translate(probe, timeout_s=min(10.0, remaining)).ordered
                    if result is not None:
                        if result.status != "ok":
                            raise WorkerNotReady(
                                f"probe came back {result.status}: {result.error}; "
                                f"see {self._log_path}"
                            )
                        self.last_request_at = time.monotonic()
                        return
                    bar.update()

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise WorkerNotReady(
                f"worker exited with {self._proc.returncode}; see {self._log_path}"
            )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def stop(self, timeout_s: float = 60.0) -> None:
        """Graceful stop (SIGTERM), then SIGKILL if it hangs."""
        self.signal(signal.SIGTERM, timeout_s)

    def dump_stacks(self, settle_s: float = 2.0) -> None:
        """Have a running worker log every thread's stack and asyncio task (SIGUSR1:
        mode's handler, run by the worker's event loop)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGUSR1)
                time.sleep(settle_s)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze the worker (SIGSTOP) for the block, then let it go on (SIGCONT).

        Tests use it to control timing: what is sent meanwhile waits in Kafka, so it
        reaches the worker together whatever the machine's load. Keep the block shorter
        than the consumer session timeout, or the group rebalances (no loss, only delay).
        """
        if self._proc is None or self._proc.poll() is not None:
            raise WorkerNotReady(f"worker not running; see {self._log_path}")
        os.killpg(self._proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self._proc.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def engine_held(self) -> Iterator[None]:
        """No engine call starts during the block (the worker's ``engine.hold_file``);
        the worker goes on reading ahead, and what waits runs by priority afterwards."""
        if self._hold_file is None:
            raise WorkerNotReady("this worker was started without a hold file")
        self._hold_file.touch()
        try:
            yield
        finally:
            self._hold_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """Crash it: no graceful shutdown, no final commit."""
        self.signal(signal.SIGKILL, 10.0)

    def signal(self, sig: signal.Signals, timeout_s: float = 60.0) -> float | None:
        """Send ``sig`` and wait for the exit; seconds it took (None: not running)."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        began = time.monotonic()
        os.killpg(self._proc.pid, sig)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("worker %s did not stop in %ss; killing it", self._proc.pid, timeout_s)
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)
        return time.monotonic() - began

    def __enter__(self) -> WorkerProcess:
        return self if self.returncode is None and self._proc else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
