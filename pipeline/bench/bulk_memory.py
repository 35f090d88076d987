"""Peak memory of ``bulk run`` on a generated corpus of a chosen size.

The corpus is written incrementally (a Parquet row group at a time), so
generating a 2 GB corpus needs little memory itself. Every document repeats
one sentence of about 15 KB (generated words), so each segment is close to
the message limit (few Kafka records per byte) and all segments share one
text: the engine translates it once (or never, once the Redis cache has it,
since the tenant is fixed) and the dedup window and caches answer the rest,
so the engine's speed does not decide the run time. The runner holds what
it would hold for any text of that size; that is what is measured:
``bulk run`` runs in a process of its own and its peak resident set is the
high-water mark of its own address space (``VmHWM``), polled while it runs.
``wait4``'s ``ru_maxrss`` is not used: Linux carries the parent's resident
set across fork and exec into it, so a test process that has grown to
800 MB would report 800 MB for any child.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.workload import bulk_run_command
from pipeline.contract.pairs import Pair
from pipeline.sample_sentences import SentenceGenerator

MB = 1 << 20
# how often the child's high-water mark is read
POLL_S = 0.05
ROW_GROUP_ROWS = 64
_SENTENCE_ENDS = str.maketrans("", "", ".!?…。！？")


SENTENCE_BYTES = 15_000
TENANT = "bench-bulk-memory"


def long_sentence(size: int = SENTENCE_BYTES, seed: int = 3) -> str:
    """One sentence of about ``size`` bytes of generated words."""
    generator = SentenceGenerator(seed, min_words=8, max_words=20)
    parts: list[str] = []
    total = 0
    while total < size:
        words = generator.sentence().translate(_SENTENCE_ENDS)
        parts.append(words)
        total += len(words.encode()) + 1
    return " ".join(parts) + "."


def long_text(doc_bytes: int) -> str:
    """About ``doc_bytes``: one long sentence, repeated."""
    sentence = long_sentence()
    return " ".join([sentence] * max(1, doc_bytes // len(sentence.encode())))


def write_corpus(path: Path, corpus_bytes: int, doc_bytes: int = 64 * 1024) -> tuple[int, int]:
    """A Parquet corpus of about ``corpus_bytes`` of text; (documents, text bytes)."""
    text = long_text(doc_bytes)
    size = len(text.encode())
    documents = max(1, corpus_bytes // size)
    schema = pa.schema([("id", pa.string()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, documents, ROW_GROUP_ROWS):
            n = min(ROW_GROUP_ROWS, documents - start)
            writer.write_table(
                pa.table(
                    {
                        "id": [f"doc-{i:09d}" for i in range(start, start + n)],
                        "text": [text] * n,
                    },
                    schema=schema,
                )
            )
    return documents, documents * size


def run_bulk_measured(
    command: list[str], env: dict[str, str], log_path: Path, timeout_s: float
) -> tuple[int, float, float]:
    """Run ``command``; (exit code, peak RSS in MB, wall seconds).

    The peak is the largest ``VmHWM`` read while the process runs: a
    high-water mark, so growth is missed only in its last poll interval.
    """
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = started + timeout_s
    peak_kb = 0
    while proc.poll() is None:
        peak_kb = max(peak_kb, high_water_rss_kb(proc.pid))
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            break
        time.sleep(POLL_S)
    return proc.returncode, peak_kb / 1024, time.monotonic() - started


def high_water_rss_kb(pid: int) -> int:
    """The peak resident set of ``pid``'s current image in kB (0 once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def measure_bulk_memory(
    work_dir: Path,
    corpus_mb: float,
    pair: Pair,
    *,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Generate a corpus, translate it with ``bulk run`` (a worker must serve ``pair``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    corpus = work_dir / f"corpus-{corpus_mb:g}mb.parquet"
    output = work_dir / f"out-{corpus_mb:g}mb.parquet"
    documents, text_bytes = write_corpus(corpus, int(corpus_mb * MB))
    job_id = f"memory-{corpus_mb:g}mb-{os.getpid()}-{time.time_ns() % 10**9}"
    command = bulk_run_command(corpus, pair, output, job_id, TENANT, "--json", *extra_args)
    code, peak_mb, wall_s = run_bulk_measured(
        command, {**os.environ, **(env or {})}, work_dir / f"bulk-{corpus_mb:g}mb.log", timeout_s
    )
    statuses = (
        pq.read_table(output, columns=["status"]).column("status").to_pylist() if code == 0 else []
    )
    return {
        "corpus_mb": round(text_bytes / MB, 1),
        "documents": documents,
        "exit_code": code,
        "peak_rss_mb": round(peak_mb, 1),
        "wall_s": round(wall_s, 1),
        "documents_ok": statuses.count("ok"),
        "log": str(work_dir / f"bulk-{corpus_mb:g}mb.log"),
    }
