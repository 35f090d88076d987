"""HTTP/1.1 as the gateway serves it: uvicorn's httptools protocol with bounded heads and
slow clients timed out.

uvicorn bounds neither the size of a request's head (its request line and
headers) nor the time a client takes to send it or its body: a 10 MB header
was accepted, unfinished heads held memory before any key check, and a
client trickling bytes held its connection for as long as it liked.
:class:`GuardedHttpProtocol` answers, before the application sees the request:

* **431** when the head exceeds ``gateway.max_header_bytes`` (counted as the
  bytes arrive, so an unfinished head is bounded too) or holds more than
  ``gateway.max_headers`` headers;
* **408** when a head is not complete ``gateway.header_timeout_s`` after its
  connection opened or its previous request was answered, or a body is not
  complete ``gateway.body_timeout_s`` after its head.

Each answer is LibreTranslate's ``{"error": ...}`` with the CORS headers; the
connection is half-closed after it and closed ``gateway.refused_linger_s``
later. Everything else is uvicorn's. This module is the only one that reaches
into uvicorn's protocol (``parser``, ``transport``, ``cycle``, its callbacks).
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from pipeline.settings import GatewaySettings

log = logging.getLogger(__name__)

# LibreTranslate's CORS headers, also on answers the application never saw
_CORS = (
    b"access-control-allow-origin: *\r\n"
    b"access-control-allow-headers: Authorization, Content-Type\r\n"
    b"access-control-expose-headers: Authorization\r\n"
    b"access-control-allow-methods: GET, POST\r\n"
)
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the gateway's head and body limits.

    Built by :func:`protocol_class` (uvicorn's ``http=`` takes a class).
    """

    limits: GatewaySettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True
        self._head_bytes = 0  # bytes received while the head is being read
        self._header_count = 0
        self._header_bytes = 0
        self._head_refused: str | None = None
        self._discarding = False  # refused: what still arrives is read and dropped
        self._timer: asyncio.TimerHandle | None = None

    # -- uvicorn's callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head()
        # a connection that never sends a head is timed out as one that sends it slowly
        self._arm(self.limits.header_timeout_s, "Request headers not received in time")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._reading_head:
            if self._timer is None:  # the first bytes of a kept-alive connection's next head
                self._arm(self.limits.header_timeout_s, "Request headers not received in time")
            self._head_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            if self._head_refused is not None:
                self._refuse(431, self._head_refused)
            else:
                self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserError:
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            super().data_received(b"")  # uvicorn decides on the upgrade
            return
        # a head still unfinished: what the parser buffers for it is bounded too
        if self._reading_head and self._head_bytes > self.limits.max_header_bytes:
            self._refuse(431, self._too_large())

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self.limits.max_headers:
            self._head_refused = f"Too many request headers: at most {self.limits.max_headers}"
        elif self._header_bytes > self.limits.max_header_bytes:
            self._head_refused = self._too_large()
        if self._head_refused is not None:
            raise ValueError(self._head_refused)  # stops the parser: data_received answers
        super().on_header(name, value)

    def _too_large(self) -> str:
        return f"Request headers too large: at most {self.limits.max_header_bytes} bytes"

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._arm(self.limits.body_timeout_s, "Request body not received in time")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # idle until the next head begins: uvicorn's keep-alive timeout applies meanwhile
        self._expect_head()

    # -- the limits ------------------------------------------------------------------------

    def _expect_head(self) -> None:
        self._reading_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._header_bytes = 0
        self._head_refused = None

    def _arm(self, timeout_s: float, message: str) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(timeout_s, partial(self._refuse, 408, message))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` unless a response has begun, then close the connection."""
        self._cancel_timer()
        if self.transport.is_closing() or self._discarding:
            return
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            body = json.dumps({"error": message}).encode()
            self.transport.write(
                b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
                + b"content-type: application/json\r\n"
                + b"content-length: %d\r\n" % len(body)
                + _CORS
                + b"connection: close\r\n\r\n"
                + body
            )
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the application's receive() gets a disconnect
            cycle.message_event.set()
        log.info("%s: %d %s", _peer(self.client), status, message)
        # Closing with unread input would reset the connection, and the client lose the
        # answer: half-close, discard what still arrives for a moment, then close.
        self._discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(self.limits.refused_linger_s, self.transport.close)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def protocol_class(limits: GatewaySettings) -> type[GuardedHttpProtocol]:
    """The protocol class uvicorn builds per connection, bound to the gateway's limits."""
    return type("GatewayHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})
