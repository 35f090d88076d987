"""``status``: what a worker's engine runs on, read from its readiness page."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from pipeline.cli.status import HttpProbe, engine_in_use

READY = "http://127.0.0.1:6066/babelstream/ready"


def test_the_engine_in_words() -> None:
    body = {
        "ready": True,
        "engine": {
            "device": "cuda",
            "replicas": 4,
            "threads_per_replica": 1,
            "compute_types": {"opus-en-de": "float16", "opus-de-en": "float16"},
            "cublas": "/venv/lib/python3.12/site-packages/nvidia/cublas/lib",
        },
    }
    assert engine_in_use(HttpProbe(READY, 200, body)) == "cuda float16, 4 replicas"
    one = {"engine": {"device": "cpu", "replicas": 1, "compute_types": {"m": "int8"}}}
    assert engine_in_use(HttpProbe(READY, 503, one)) == "cpu int8, 1 replica"


def test_a_page_without_the_engine_says_nothing() -> None:
    assert engine_in_use(HttpProbe(READY, 200, {"ready": True})) is None
    assert engine_in_use(HttpProbe(READY, None, None, "connection refused")) is None


def test_a_marked_sla_run_reads_running_then_stopped(tmp_path: Path) -> None:
    """`status` once said `running active` minutes after `babelstream sla` stopped: the
    checkpoint's last micro-batch cannot tell; the run's marker can."""
    from pipeline.cli.sla_run import marked_run, marker_path, run_state

    checkpoint = tmp_path / "checkpoints" / "sla"
    assert run_state(checkpoint).running is None  # never marked: status falls back
    with marked_run(checkpoint):
        during = run_state(checkpoint)
    after = run_state(checkpoint)
    assert during.running is True and str(os.getpid()) in during.detail
    assert after.running is False and after.detail.startswith("stopped at ")
    # a run killed before it could mark its stop
    marker_path(checkpoint).write_text(
        json.dumps({"pid": 2**22 + 7, "host": socket.gethostname(), "started_ms": 1}),
        encoding="utf-8",
    )
    killed = run_state(checkpoint)
    assert killed.running is False and "ended without stopping" in killed.detail
