"""A worker serving a 200-language model: 39,800 pairs, two work topics, ready in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.model import BenchModelShape, build_multilingual_bench_model
from pipeline.bench.pairs import sample_pairs, spread_requests
from pipeline.client import ReplyBatch, ResultListener, TranslationClient
from pipeline.contract.pairs import RESULTS_TOPIC, WORK_PREFIX
from pipeline.engine.registry import Registry
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import WorkerProcess

pytestmark = pytest.mark.integration

LANGUAGES = 200
# small weights: the test is about the pipeline's cost per pair, not the engine's
TINY = BenchModelShape(
    d_model=64, encoder_layers=1, decoder_layers=1, heads=2, ffn=128, vocab_size=3000
)


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


def test_a_worker_on_200_languages_subscribes_one_work_topic_and_serves_any_pair(
    settings: Settings, tmp_path: Path
) -> None:
    registry = tmp_path / "multilingual.toml"
    build_multilingual_bench_model(
        tmp_path / "nllb-tiny", registry, languages=LANGUAGES, shape=TINY, sentences=3000
    )
    assert Registry.load(registry).pair_count() == LANGUAGES * (LANGUAGES - 1)
    pairs = sample_pairs(registry, 24)
    worker = WorkerProcess(
        settings,
        log_path=PROJECT_ROOT / "var" / "log" / "test-multilingual-worker.log",
        env={
            "BABELSTREAM_ENGINE__REGISTRY": str(registry),
            "BABELSTREAM_WORKER__STATIC_MEMBERSHIP": "false",
        },
        probe_pair=pairs[0],
    )
    worker.start()
    try:
        assigned = (worker.readiness() or {}).get("assigned", {})
        work = sorted(t for t in assigned if t.startswith(WORK_PREFIX))
        assert len(work) == 1, f"one work topic for the model, whatever its pairs: {work}"
        requests = spread_requests([f"Sentence number {i}." for i in range(48)], pairs)
        replies = ReplyBatch(request_ids=[r.request_id for r in requests])
        stats = worker.stats()
        before, texts_before = sum(stats["engine_batch_sizes"].values()), stats["engine_texts"]
        with ResultListener(settings.kafka, [RESULTS_TOPIC]) as listener:
            # frozen while they are produced, so the requests of every pair wait together
            # whatever the machine's load
            with worker.paused(), TranslationClient(settings.kafka, settings.limits) as client:
                client.submit(requests)
            listener.collect(replies, timeout_s=120)
        results = [r for r in replies.ordered if r is not None]
        assert {r.status for r in results} == {"ok"} and len(results) == len(requests)
        assert {r.pair for r in results} == {p.id for p in pairs}
        # the results may come before the worker counted their batch
        stats = worker.stats_when(lambda s: s["engine_texts"] >= texts_before + len(requests))
        calls = sum(stats["engine_batch_sizes"].values()) - before
        # one call (or more) per pair would be fewer than 24 only if pairs share calls
        assert calls < len(pairs), f"texts of many pairs share engine calls: {calls} calls"
    finally:
        worker.stop()
