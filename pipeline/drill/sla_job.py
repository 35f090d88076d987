"""The SLA job under a drill: ``babelstream sla`` on a checkpoint of its own, and its windows.

:class:`SlaJob` runs the job as a child process (Kafka sink only, short
windows and lateness from ``drill.*``) and can kill and restart it on the same
checkpoint. :class:`WindowTally` reads what it writes to ``translate.sla``;
:func:`check_windows` compares that with the results the job read: every
window the watermark closed must be there once, with the right count.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.contract.messages import SlaWindow
from pipeline.contract.pairs import SLA_TOPIC
from pipeline.drill.reconcile import TopicFollower
from pipeline.errors import BabelStreamError
from pipeline.settings import DrillSettings, KafkaSettings

# logged by jobs.sla at INFO (-v) after every micro-batch
_BATCH = re.compile(r"jobs\.sla: batch \d+: ")


class SlaJobFailed(BabelStreamError):
    """The drilled SLA job exited, or did not run a micro-batch in time."""


class SlaJob:
    """``babelstream -v sla`` on ``<home>/checkpoint``, its output in ``<home>/sla.log``,
    its windows of one pair in :attr:`windows`."""

    def __init__(
        self,
        env: dict[str, str],
        home: Path,
        drill: DrillSettings,
        kafka: KafkaSettings,
        pair_id: str,
    ) -> None:
        self._env = {**os.environ, **env}
        self.home = home
        self.log_path = home / "sla.log"
        self._drill = drill
        self._proc: subprocess.Popen[bytes] | None = None
        # read from before the first start: every window it ever writes
        self.windows = WindowTally(kafka, pair_id)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pipeline",
            "-v",
            "sla",
            "--window",
            str(self._drill.sla_window_s),
            "--watermark",
            str(self._drill.sla_watermark_s),
            "--sinks",
            "kafka",
            "--checkpoint",
            str(self.home / "checkpoint"),
            "--history",
            str(self.home / "history"),
            # a fresh checkpoint starts at the end: the windows compared are the drill's
            "--starting-offsets",
            "latest",
            # the late-rows branch is not drilled: the windows alone
            "--no-late-rows",
        ]

    def start(self, timeout_s: float) -> float:
        """Start it and wait for its first micro-batch; the seconds that took."""
        began = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()
        logged = self.log_path.stat().st_size
        with self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        while not _BATCH.search(self._log_since(logged)):
            if self._proc.poll() is not None:
                raise SlaJobFailed(
                    f"the SLA job exited with {self._proc.returncode}; see {self.log_path}"
                )
            if time.monotonic() - began > timeout_s:
                self.kill()
                raise SlaJobFailed(
                    f"the SLA job ran no micro-batch in {timeout_s:.0f}s; see {self.log_path}"
                )
            time.sleep(0.5)
        return time.monotonic() - began

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no stop between micro-batches, no sink flushed."""
        self._signal(signal.SIGKILL, 10.0)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (the job stops between micro-batches), SIGKILL past ``timeout_s``;
        stop reading its windows."""
        self._signal(signal.SIGTERM, timeout_s)
        self.windows.close()

    def _signal(self, sig: signal.Signals, timeout_s: float) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, sig)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)


class WindowTally(TopicFollower):
    """Every interactive SLA window of one pair written from now on (one written twice, twice)."""

    def __init__(self, kafka: KafkaSettings, pair_id: str, topic: str = SLA_TOPIC) -> None:
        self._pair_id = pair_id
        self._windows: list[SlaWindow] = []
        super().__init__(kafka, topic, "drill-sla")

    def take(self, value: bytes) -> None:
        try:
            window = SlaWindow.from_json(value)
        except ValidationError:
            return
        if window.pair == self._pair_id and window.priority == "interactive":
            self._windows.append(window)

    def snapshot(self) -> list[SlaWindow]:
        with self._lock:
            return list(self._windows)


@dataclass(frozen=True)
class WindowCheck:
    """Windows the job had to emit against those it emitted (window starts, epoch ms)."""

    expected: int
    emitted: int
    missing: list[int]
    emitted_twice: list[int]
    # window start -> (count + duplicates the job wrote, results the drill saw in it)
    wrong_counts: dict[int, tuple[int, int]]

    def problems(self) -> list[str]:
        found = []
        if self.missing:
            found.append(
                f"{len(self.missing)} SLA windows never emitted (starts {self.missing[:5]})"
            )
        if self.emitted_twice:
            found.append(
                f"{len(self.emitted_twice)} SLA windows emitted twice "
                f"(starts {self.emitted_twice[:5]})"
            )
        if self.wrong_counts:
            found.append(
                f"{len(self.wrong_counts)} SLA windows with a wrong count "
                f"(start: (written, seen)) {dict(list(self.wrong_counts.items())[:5])}"
            )
        return found

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["wrong_counts"] = {str(k): list(v) for k, v in self.wrong_counts.items()}
        return data


def check_windows(
    windows: Sequence[SlaWindow],
    completed_at: Sequence[int],
    *,
    since_ms: int,
    window_ms: int,
    watermark_ms: int,
) -> WindowCheck:
    """Compare emitted ``windows`` with the results' ``completed_at`` times (tumbling windows).

    Expected: every window that starts at or after ``since_ms``, holds at least
    one result, and ends by the watermark the newest result allows (newest
    ``completed_at`` - ``watermark_ms``; workers' ticks may close more). Every
    result the job received counts once: in ``count``, or in ``duplicates`` when
    its request id was counted already, so their sum must equal the results
    (every copy) whose ``completed_at`` falls in the window.
    """
    first = math.ceil(since_ms / window_ms) * window_ms
    seen = Counter(t // window_ms * window_ms for t in completed_at if t >= first)
    closed_until = max(completed_at, default=first) - watermark_ms
    expected = {start: n for start, n in seen.items() if start + window_ms <= closed_until}
    emitted = Counter(w.window_start for w in windows if w.window_start >= first)
    written = {w.window_start: w.count + w.duplicates for w in windows if w.window_start >= first}
    return WindowCheck(
        expected=len(expected),
        emitted=len(emitted),
        missing=sorted(set(expected) - set(emitted)),
        emitted_twice=sorted(start for start, n in emitted.items() if n > 1),
        wrong_counts={
            start: (count, seen.get(start, 0))
            for start, count in sorted(written.items())
            if count != seen.get(start, 0) and start + window_ms <= closed_until
        },
    )
