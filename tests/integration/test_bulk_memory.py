"""``bulk run`` memory stays flat as the corpus grows (real stack, real worker).

Two generated corpora, 4 MB and 16 MB of text, run with a small in-flight
cap and assembly window; the peak resident set of the ``bulk run`` process
(its own rusage) must not grow with the input. Holding the corpus, its
segments or its results in memory, as a non-streaming runner does, adds
several times the corpus size (the generated text has emoji and other
non-Latin characters: Python holds it at 4 bytes a character). The 2 GB run is ``babelstream bench
bulk-memory --mb 2048`` (docs/guides/bulk.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.bench.bulk_memory import measure_bulk_memory
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess

pytestmark = pytest.mark.integration

SMALL_MB, LARGE_MB = 4, 16
# the runner's bounds for this test: 2 MB assembly window, 100 segments (1.6 MB) in flight
ENV = {"BABELSTREAM_BULK__WINDOW_BYTES": str(2 << 20)}
ARGS = ("--max-in-flight", "100")


@pytest.fixture(scope="module")
def worker(stack: object) -> Iterator[WorkerProcess]:
    settings: Settings = load_settings()
    log_path = PROJECT_ROOT / "var" / "log" / "test-bulk-memory-worker.log"
    with WorkerProcess(settings, log_path=log_path) as w:
        yield w


@pytest.mark.timeout(1200)
def test_peak_memory_does_not_grow_with_the_corpus(worker: WorkerProcess, tmp_path: Path) -> None:
    small = measure_bulk_memory(
        tmp_path, SMALL_MB, DEMO_PAIR, env=ENV, extra_args=ARGS, timeout_s=400
    )
    large = measure_bulk_memory(
        tmp_path, LARGE_MB, DEMO_PAIR, env=ENV, extra_args=ARGS, timeout_s=600
    )
    for run in (small, large):
        assert run["exit_code"] == 0, Path(run["log"]).read_text()[-3000:]
        assert run["documents_ok"] == run["documents"]
    growth = large["peak_rss_mb"] - small["peak_rss_mb"]
    print(
        f"\npeak RSS {small['corpus_mb']} MB corpus: {small['peak_rss_mb']} MB, "
        f"{large['corpus_mb']} MB corpus: {large['peak_rss_mb']} MB "
        f"({large['wall_s']} s)"
    )
    # 4x the input (+12 MB of text, 48 MB as Python holds it) may add a fraction of one copy
    assert growth < 10, (small, large)
    assert large["peak_rss_mb"] < 500
