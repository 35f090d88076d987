"""Drive Debian's headless Chromium over the Chrome DevTools Protocol (for UI tests).

No browser-automation package: Chromium is started with a fresh profile and
``--remote-debugging-port=0``, and one page target is driven over its
WebSocket with aiohttp (``Runtime.evaluate``, ``Page.captureScreenshot``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium_binary() -> str | None:
    """Debian's chromium, when installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """A headless Chromium process with a fresh profile, showing ``url``."""

    def __init__(
        self,
        binary: str,
        profile_dir: Path,
        log_path: Path,
        window_size: tuple[int, int] = (1280, 2000),
    ) -> None:
        self._binary = binary
        self._profile = profile_dir
        self._log_path = log_path
        self._size = window_size
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, url: str, timeout_s: float = 30.0) -> Chromium:
        self._profile.mkdir(parents=True, exist_ok=True)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            self._binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self._profile}",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            f"--window-size={self._size[0]},{self._size[1]}",
            url,
        ]
        with self._log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while not port_file.exists() or not port_file.read_text().strip():
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"chromium exited with {self._proc.returncode}; see {self._log_path}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium did not open DevTools; see {self._log_path}")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])
        return self

    def page_websocket(self, timeout_s: float = 15.0) -> str:
        """The DevTools WebSocket URL of the (first) page target."""
        deadline = time.monotonic() + timeout_s
        while True:
            url = f"http://127.0.0.1:{self.port}/json/list"
            with urllib.request.urlopen(url, timeout=5) as response:
                targets = json.load(response)
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no page target among {targets}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)


class DevToolsPage:
    """One page's DevTools session (use inside ``async with``)."""

    def __init__(self, websocket_url: str) -> None:
        self._url = websocket_url
        self._ids = itertools.count(1)
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> DevToolsPage:
        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(self._url, max_msg_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events are skipped)."""
        assert self._ws is not None
        message_id = next(self._ids)
        await self._ws.send_json({"id": message_id, "method": method, "params": params})
        while True:
            reply = await self._ws.receive_json(timeout=30)
            if reply.get("id") != message_id:
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply["result"]

    async def goto(self, url: str, timeout_s: float = 30.0) -> None:
        """Navigate and wait until the document has loaded."""
        result = await self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise RuntimeError(f"navigating to {url}: {result['errorText']}")
        await self.wait_for(
            f"location.href === {url!r} && document.readyState === 'complete'", timeout_s
        )

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll until ``expression`` is truthy (errors count as not yet); returns its value."""
        deadline = time.monotonic() + timeout_s
        error: Exception | None = None
        while True:
            try:
                value = await self.evaluate(expression)
            except RuntimeError as exc:  # e.g. the page is still loading
                value, error = None, exc
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never satisfied {expression!r} (last error: {error})")
            await asyncio.sleep(0.2)

    async def screenshot(self, path: Path) -> Path:
        """Save a full-page PNG screenshot."""
        result = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))
        return path
