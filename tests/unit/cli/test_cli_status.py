"""``status``: what a worker's engine runs on, read from its readiness page."""

from __future__ import annotations

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
