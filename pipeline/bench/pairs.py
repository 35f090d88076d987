"""The same load spread over more and more pairs: cost must follow models and work, not pairs.

``babelstream bench pairs`` runs one step per pair count (1, 4, 16, 64 pairs
of one model by default): a registry of its own in which every pair names the
same model, a worker started on it, and the same requests spread evenly over
the pairs. A worker batches by model, so with 64 pairs its micro-batches, engine
calls, topics and agents should be those of one pair. Each step reports the
throughput, the mean engine batch, the work topics and partitions the worker
consumes, its resident memory and how long it took to be ready. The first
step runs again after the others, and the ratios are against the mean of its
two runs: the machine drifts over a run.

Two more steps, when asked for: a multilingual model (``models build-bench
--languages 200``: 39,800 pairs in one registry table) started and loaded
with pairs drawn from all of them, and several bilingual models under a memory
budget (``engine.max_loaded_models``) small enough that serving them in turn
loads and unloads models (their loads and evictions counted).
"""

from __future__ import annotations

import random
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from pipeline.bench.e2e import stats_delta
from pipeline.bench.load import run_load
from pipeline.bench.model import synthetic_languages
from pipeline.bench.report import LoadFigures
from pipeline.bench.target import refuse_if_served
from pipeline.client import RequestOptions, build_requests
from pipeline.contract.messages import TranslationRequest
from pipeline.contract.pairs import WORK_PREFIX, Pair
from pipeline.engine.registry import PairEntry, Registry
from pipeline.settings import Settings
from pipeline.stack.local_worker import WorkerProcess


@dataclass(frozen=True)
class PairsStep:
    """One step: a registry, a worker on it, the load spread over ``pairs`` pairs."""

    name: str
    pairs: int
    models: int
    # pairs the registry serves (a multilingual model serves more than the load uses)
    registry_pairs: int
    load: LoadFigures
    mean_engine_batch: float | None
    work_topics: int
    partitions: int
    worker_rss_mb: float
    ready_s: float
    model_loads: int
    model_evictions: int
    extra: dict[str, Any] = field(default_factory=dict)


def spread_registry(
    path: Path, base: PairEntry, pairs: int, models: int = 1, run: str = ""
) -> list[Pair]:
    """A registry of ``pairs`` pairs (``en`` to synthetic languages) of ``base``'s model
    directory, dealt round-robin to ``models`` model ids; the pairs."""
    targets = synthetic_languages(pairs)
    chosen = [Pair(base.pair.source, t) for t in targets]
    tables = []
    for i, pair in enumerate(chosen):
        tables.append(
            {
                "id": pair.id,
                "model": str(base.model_dir),
                "model_id": f"pairs{run}-m{i % models}",
                "source_tokenizer": str(base.source_tokenizer.relative_to(base.model_dir)),
                "target_tokenizer": str(base.target_tokenizer.relative_to(base.model_dir)),
                "target_prefix": list(base.target_prefix),
                "source_prefix": list(base.source_prefix),
                "source_suffix": list(base.source_suffix),
                "suppress_tokens": list(base.suppress_tokens),
                "compute_type": base.compute_type,
                "max_input_tokens": base.max_input_tokens,
                "max_output_tokens": base.max_output_tokens,
                "decoding": base.decoding,
            }
        )
    path.write_text(tomli_w.dumps({"pair": tables}))
    Registry.load(path)  # what was written reads back
    return chosen


def spread_requests(texts: Sequence[str], pairs: Sequence[Pair]) -> list[TranslationRequest]:
    """``texts[i]`` for ``pairs[i % len(pairs)]``, under a tenant of their own (no cache)."""
    options = RequestOptions(timeout_ms=3_600_000, tenant=f"bench-{uuid.uuid4().hex[:8]}")
    return [
        build_requests([text], pairs[i % len(pairs)], options)[0] for i, text in enumerate(texts)
    ]


@contextmanager
def registry_worker(
    settings: Settings, registry: Path, probe: Pair, log_name: str, env: dict[str, str]
) -> Iterator[tuple[WorkerProcess, float]]:
    """A worker on ``registry`` (dynamic membership: it leaves its group when it stops),
    and the seconds from its start to ready (its probe answered)."""
    worker = WorkerProcess(
        settings,
        log_path=settings.stack.home / "log" / log_name,
        env={
            "BABELSTREAM_ENGINE__REGISTRY": str(registry),
            "BABELSTREAM_WORKER__STATIC_MEMBERSHIP": "false",
            **env,
        },
        probe_pair=probe,
    )
    began = time.monotonic()
    worker.start()
    try:
        yield worker, time.monotonic() - began
    finally:
        worker.stop()


def measure_step(
    settings: Settings,
    name: str,
    registry: Path,
    pairs: Sequence[Pair],
    texts: Sequence[str],
    *,
    env: dict[str, str] | None = None,
) -> PairsStep:
    """Start a worker on ``registry``, send ``texts`` spread over ``pairs``, stop it."""
    served = Registry.load(registry)
    refuse_if_served(
        settings.kafka, next(iter(served.models)), grace_s=settings.worker.session_timeout_s
    )
    with registry_worker(settings, registry, pairs[0], f"bench-pairs-{name}.log", env or {}) as (
        worker,
        ready_s,
    ):
        assert worker.pid is not None
        before, metrics_before = worker.stats(), _model_counts(worker)
        report = run_load(settings.kafka, spread_requests(texts, pairs))
        after, metrics_after = worker.stats(), _model_counts(worker)
        rss = psutil.Process(worker.pid).memory_info().rss / 2**20
        assigned = (worker.readiness() or {}).get("assigned", {})
    delta = stats_delta(before, after)
    sizes = {int(k): v for k, v in delta["engine_batch_sizes"].items()}
    calls = sum(sizes.values())
    work = {t: p for t, p in assigned.items() if t.startswith(WORK_PREFIX)}
    return PairsStep(
        name=name,
        pairs=len(pairs),
        models=len(served.models),
        registry_pairs=served.pair_count(),
        load=LoadFigures.from_summary(report.summary(), **delta),
        mean_engine_batch=round(sum(k * v for k, v in sizes.items()) / calls, 2) if calls else None,
        work_topics=len(work),
        partitions=sum(len(p) for p in assigned.values()),
        worker_rss_mb=round(rss, 1),
        ready_s=round(ready_s, 2),
        model_loads=metrics_after[0] - metrics_before[0],
        model_evictions=metrics_after[1] - metrics_before[1],
    )


def sample_pairs(registry: Path, count: int, seed: int = 3) -> list[Pair]:
    """``count`` distinct pairs of a multilingual registry's models, drawn at random."""
    rng = random.Random(seed)
    models = list(Registry.load(registry).models.values())
    languages = [m.languages for m in models if m.languages is not None]
    chosen: set[Pair] = set()
    while len(chosen) < count:
        spec = rng.choice(languages)
        src, tgt = rng.sample(sorted(spec.sources & spec.targets), 2)
        chosen.add(Pair(src, tgt))
    return sorted(chosen, key=lambda p: p.id)


def _model_counts(worker: WorkerProcess) -> tuple[int, int]:
    """(model loads, model evictions) so far, from the worker's metrics endpoint."""
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    loads = evictions = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "babelstream_model_load_seconds_count":
                loads += sample.value
            elif sample.name == "babelstream_model_evictions_total":
                evictions += sample.value
    return int(loads), int(evictions)
