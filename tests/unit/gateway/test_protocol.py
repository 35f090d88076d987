"""The gateway's HTTP limits on a real uvicorn server (an echo application, no Kafka):
heads too large or with too many headers answer 431, slow heads and bodies 408, each as
LibreTranslate's JSON error with CORS; requests within the limits are served as before."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from pipeline.gateway.protocol import protocol_class
from pipeline.settings import GatewaySettings
from tests.raw_http import exchange, status_and_error

LIMITS = GatewaySettings(
    max_header_bytes=4096,
    max_headers=20,
    header_timeout_s=0.5,
    body_timeout_s=0.5,
    refused_linger_s=0.2,
)


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 200 with the length of the body it read."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = json.dumps({"read": len(body)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(echo, http=protocol_class(LIMITS), log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield sock.getsockname()
    srv.should_exit = True
    thread.join(5)


def request(headers: str = "", body: bytes = b"") -> bytes:
    return (
        f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def test_requests_within_the_limits_are_served(server: tuple[str, int]) -> None:
    status, _, _ = status_and_error(exchange(server, request("X-A: 1\r\n", b"hello")))
    assert status == 200


def test_a_head_over_the_byte_limit_answers_431(server: tuple[str, int]) -> None:
    status, error, head = status_and_error(exchange(server, request(f"X-Big: {'a' * 5000}\r\n")))
    assert status == 431 and error is not None and "4096 bytes" in error
    assert b"access-control-allow-origin: *" in head and b"application/json" in head


def test_an_unfinished_head_over_the_byte_limit_answers_431_before_it_ends(
    server: tuple[str, int],
) -> None:
    """The head never ends; the server refuses once it has more than the limit."""
    chunks = [b"POST /translate HTTP/1.1\r\nX-Big: "] + [b"a" * 1024] * 8
    status, error, _ = status_and_error(exchange(server, *chunks, pause_s=0.01))
    assert status == 431 and error is not None


def test_too_many_headers_answer_431(server: tuple[str, int]) -> None:
    many = "".join(f"X-{i}: v\r\n" for i in range(25))
    status, error, _ = status_and_error(exchange(server, request(many)))
    assert status == 431 and error is not None and "at most 20" in error


def test_a_trickled_head_answers_408(server: tuple[str, int]) -> None:
    """Slowloris: a byte of the head at a time, never finished within the timeout."""
    chunks = [b"POST /translate HTTP/1.1\r\n"] + [b"X"] * 20
    started = time.monotonic()
    status, error, _ = status_and_error(exchange(server, *chunks, pause_s=0.1))
    assert status == 408 and error is not None and "headers" in error
    assert time.monotonic() - started < 2.5


def test_a_connection_that_sends_nothing_is_closed(server: tuple[str, int]) -> None:
    status, error, _ = status_and_error(exchange(server))
    assert status == 408 and error is not None


def test_a_trickled_body_answers_408(server: tuple[str, int]) -> None:
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    status, error, _ = status_and_error(exchange(server, head, *[b"a"] * 20, pause_s=0.1))
    assert status == 408 and error is not None and "body" in error


def test_a_kept_alive_connection_serves_its_next_request(server: tuple[str, int]) -> None:
    """The head timeout starts with the next head's first byte, not at the last answer."""
    with socket.create_connection(server, timeout=3) as conn:
        answers = []
        for _ in range(2):
            conn.sendall(request(body=b"hi"))
            answers.append(conn.recv(65536))
            time.sleep(0.7)  # idle longer than the head timeout: keep-alive's to close
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
