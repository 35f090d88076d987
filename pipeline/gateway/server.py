"""Serving the gateway: uvicorn (httptools, uvloop) in one process or several.

With ``gateway.workers`` above 1 the parent binds the port once and starts
that many processes serving the same socket; process *i* has its own Kafka
producer and its own reply topic (``...gateway.<instance>.<i>``), the same
one after a restart. The parent stops them on SIGTERM or Ctrl-C. With
``gateway.metrics`` on they share a folder of metric values, so whichever
answers ``GET /metrics`` answers for all.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
from types import FrameType

import uvicorn

from pipeline.settings import Settings

log = logging.getLogger(__name__)


def _config(settings: Settings, process: int) -> uvicorn.Config:
    from pipeline.gateway.app import create_app
    from pipeline.gateway.protocol import protocol_class

    g = settings.gateway
    return uvicorn.Config(
        create_app(settings, process),
        host=g.host,
        port=g.port,
        loop="uvloop",
        # httptools with the gateway's head and body limits (431, 408)
        http=protocol_class(g),
        log_level="warning",
        access_log=False,
        # a request's wait may be long; keep-alive connections are the clients' to close
        timeout_keep_alive=30,
        # whose X-Forwarded-For names the client (the address request limits count by)
        proxy_headers=True,
        forwarded_allow_ips=g.forwarded_allow_ips,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (SO_REUSEADDR, as uvicorn binds)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _serve(settings: Settings, process: int, sock: socket.socket) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.Server(_config(settings, process)).run(sockets=[sock])


def serve(settings: Settings, sock: socket.socket) -> None:
    """Serve on ``sock`` until stopped (one process, or ``gateway.workers`` of them)."""
    workers = settings.gateway.workers
    if workers == 1:
        uvicorn.Server(_config(settings, 0)).run(sockets=[sock])
        return
    folder = _metrics_folder() if settings.gateway.metrics else None
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_serve, args=(settings, i, sock), name=f"gateway-{i}")
        for i in range(workers)
    ]
    for child in children:
        child.start()

    def stop(signum: int, _: FrameType | None) -> None:
        for child in children:
            if child.is_alive():
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for child in children:
        child.join()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _metrics_folder() -> str:
    """A fresh folder for the processes' metric values (prometheus_client's multiprocess
    mode), named to the processes before they start: any of them answers ``/metrics``
    for all."""
    folder = tempfile.mkdtemp(prefix="babelstream-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    return folder
