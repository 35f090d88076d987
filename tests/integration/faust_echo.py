"""A minimal Faust app for the secure-listener test: echoes each record, reversed.

It connects only through :func:`pipeline.kafka.clients.faust_app_options`
(broker URLs and credentials from settings, e.g. ``BABELSTREAM_CONFIG``), as
the worker does. Run: ``python tests/integration/faust_echo.py worker``
with ``ECHO_APP_ID``, ``ECHO_IN``, ``ECHO_OUT`` and ``ECHO_DATADIR`` set.
"""

from __future__ import annotations

import os

import faust
from faust.types import StreamT

from pipeline.kafka.clients import faust_app_options
from pipeline.settings import load_settings

settings = load_settings()
app = faust.App(
    os.environ["ECHO_APP_ID"],
    **faust_app_options(settings.kafka),
    store="memory://",
    key_serializer="raw",
    value_serializer="raw",
    topic_replication_factor=settings.kafka.replication_factor,
    consumer_auto_offset_reset="earliest",
    web_enabled=False,
    datadir=os.environ["ECHO_DATADIR"],
)
source = app.topic(os.environ["ECHO_IN"], key_type=bytes, value_type=bytes)
sink = app.topic(os.environ["ECHO_OUT"], key_type=bytes, value_type=bytes)


@app.agent(source)
async def echo(stream: StreamT) -> None:
    async for event in stream.events():
        await sink.send(key=event.key, value=bytes(event.value)[::-1])


if __name__ == "__main__":
    app.main()
