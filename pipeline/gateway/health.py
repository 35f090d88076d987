"""``GET /health`` on a port of its own, answered by a small child process.

The gateway's event loop serves every call; under a burst one turn of it runs
hundreds of calls' work, and a ``/health`` queued behind them on the main port
waits that long (about 200 ms at 256 clients on 2 cores). A probe with a 1 s
timeout would then restart a gateway that is only busy. A thread of the same
process does little better: each step of its answer waits for the
interpreter lock, held by the loop. So the answer comes from a process of its
own (standard library only, a few MB), reading a heartbeat the event loop
writes to shared memory: 200 while the loop has beaten within
``gateway.health_stall_s``, 503 when it has not (stuck, not busy), so a probe
restarts only a gateway that stopped working. The child exits when its
parent does.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from multiprocessing.sharedctypes import Synchronized
from typing import Any


def health_answer(last_beat: float, now: float, stall_s: float) -> tuple[int, dict[str, Any]]:
    """The status and body of ``GET /health`` for a loop that last beat at ``last_beat``."""
    stalled_s = now - last_beat
    if stalled_s > stall_s:
        return 503, {"status": "stalled", "loop_stalled_s": round(stalled_s, 1)}
    return 200, {"status": "ok"}


class LoopHealth:
    """The heartbeat of one event loop, and the child process that reports it over HTTP."""

    def __init__(self, host: str, port: int, stall_s: float) -> None:
        self.port = port
        self.stall_s = stall_s
        context = multiprocessing.get_context("spawn")  # nothing of the gateway's state
        self._beat: Synchronized[float] = context.Value("d", time.monotonic(), lock=False)
        self._ready = context.Event()
        self._child = context.Process(
            target=_serve,
            args=(host, port, stall_s, self._beat, self._ready, os.getpid()),
            name="gateway-health",
            daemon=True,
        )

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the child; raises :class:`OSError` when it cannot listen on its port."""
        self._child.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if not self._child.is_alive() or time.monotonic() > deadline:
                self._child.kill()
                raise OSError(f"/health could not listen on port {self.port} (in use?)")

    async def beat(self) -> None:
        """Run on the event loop: a beat every quarter of ``stall_s``, until cancelled."""
        while True:
            # CLOCK_MONOTONIC is the machine's: the child reads the same clock
            self._beat.value = time.monotonic()
            await asyncio.sleep(self.stall_s / 4)

    def stop(self) -> None:
        self._child.terminate()
        self._child.join(5)


def _serve(
    host: str,
    port: int,
    stall_s: float,
    beat: Synchronized[float],
    ready: Any,
    parent: int,
) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] == "/health":
                status, body = health_answer(beat.value, time.monotonic(), stall_s)
            else:
                status, body = 404, {"error": "Not Found"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes come every few seconds: no line each

    try:
        server = HTTPServer((host, port), Handler)
    except OSError:
        return  # the parent says so, in one line
    server.timeout = 1.0
    ready.set()
    while os.getppid() == parent:  # the gateway process is gone: so is its probe
        server.handle_request()
