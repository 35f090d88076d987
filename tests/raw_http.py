"""HTTP over a bare socket, for what HTTP clients will not send: heads too large or
unfinished, bytes trickled a few at a time."""

from __future__ import annotations

import json
import socket
import time


def exchange(address: tuple[str, int], *chunks: bytes, pause_s: float = 0.0) -> bytes:
    """Send ``chunks`` (``pause_s`` apart), then read until the server closes or 3 s pass."""
    with socket.create_connection(address, timeout=3) as conn:
        for chunk in chunks:
            try:
                conn.sendall(chunk)
            except OSError:  # the server answered and closed while we were sending
                break
            time.sleep(pause_s)
        out = b""
        try:
            while data := conn.recv(65536):
                out += data
                if b"\r\n\r\n" in out and out.startswith(b"HTTP/1.1 200") and b"}" in out:
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def status_and_error(answer: bytes) -> tuple[int, str | None, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    error = json.loads(body).get("error") if status != 200 else None
    return status, error, head.lower()
