"""Bench plumbing on the real stack: a bench worker answers everything, and a second refuses."""

from __future__ import annotations

import pytest

from pipeline.bench.e2e import measure_e2e
from pipeline.bench.target import bench_worker, refuse_if_served, resolve_target
from pipeline.bench.workload import make_texts
from pipeline.errors import ConfigError
from pipeline.settings import load_settings

pytestmark = pytest.mark.integration


def test_bench_worker_serves_every_request_and_refuses_a_second_bench(stack):
    settings = load_settings()
    target = resolve_target(settings, "en_en-XA")
    with bench_worker(target.settings(settings), target, "test-bench-worker.log") as worker:
        # another bench of this pair would share the work with this worker: it refuses
        with pytest.raises(ConfigError, match=r"group babelstream-babelstream-demo-enxa consumes"):
            refuse_if_served(settings.kafka, "babelstream-demo-enxa")
        figures = measure_e2e(settings, target, worker, make_texts(40, 0.25, seed=5))
    assert (figures.requests, figures.results, figures.missing) == (40, 40, 0)
    assert figures.statuses == {"ok": 40}
    assert figures.cache_hit_ratio > 0  # repeats answered without the engine
    assert sum(figures.engine_batch_sizes.values()) >= 1
    assert 0.0 <= (figures.padding_ratio or 0.0) < 1.0
    # the worker is gone: the pair is free again
    refuse_if_served(settings.kafka, "babelstream-demo-enxa")


def test_naive_consumer_answers_this_run_on_a_topic_of_its_own(stack):
    from pipeline.bench.e2e import measure_naive
    from pipeline.kafka.check import admin_client

    settings = load_settings()
    target = resolve_target(settings, "en_en-XA")
    for seed in (1, 2):  # a second run must not see the first run's requests
        figures = measure_naive(settings, target, make_texts(12, 0.0, seed=seed))
        assert (figures.requests, figures.results, figures.missing) == (12, 12, 0)
        assert figures.engine_batch_sizes == {"1": 12}
    admin = admin_client(settings.kafka)
    try:
        assert not [t for t in admin.list_topics() if t.startswith("translate.bench.naive.")]
    finally:
        admin.close()
