"""One typed report for every ``babelstream bench``: what ran, where, with what, and the figures.

Every bench prints a :class:`BenchReport` as JSON: the machine (with its load
average when the run started, so a figure measured on a busy machine says
so), the settings that shape the figures, and one :class:`LoadFigures` or
:class:`EngineFigures` per run, plus the ratios the bench exists for.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.bench.cpu import CpuUse
from pipeline.engine.profile import cpu_model
from pipeline.engine.registry import PairEntry
from pipeline.engine.translator import resolve_device
from pipeline.settings import Settings


@dataclass(frozen=True, slots=True)
class Machine:
    """What the figures were measured on, and how busy it was."""

    cpus: int
    cpu_model: str
    platform: str
    python: str
    ctranslate2: str
    load_avg_1m: float
    # load average above half the cores when the run started: others were running
    under_load: bool

    @classmethod
    def current(cls) -> Machine:
        import ctranslate2

        cpus = os.cpu_count() or 1
        load = os.getloadavg()[0]
        return cls(
            cpus,
            cpu_model(),
            platform.platform(),
            platform.python_version(),
            ctranslate2.__version__,
            round(load, 2),
            load > cpus / 2,
        )


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The settings that shape the figures."""

    pair: str
    model_id: str
    decoding: str
    device: str
    compute_type: str
    inter_threads: int
    intra_threads: int
    beam_size: int
    max_messages: int
    max_wait_s: float
    token_budget: int
    bulk_max_messages: int
    bulk_token_budget: int

    @classmethod
    def of(cls, settings: Settings, entry: PairEntry) -> RunSettings:
        e, w = settings.engine, settings.worker
        device = resolve_device(e.device)
        replicas, per_replica = e.threads(device)
        return cls(
            pair=entry.pair.id,
            model_id=entry.model_id,
            decoding=entry.decoding,
            device=device,
            compute_type=e.compute_type or entry.compute_type,
            inter_threads=replicas,
            intra_threads=per_replica,
            beam_size=e.beam_size,
            max_messages=w.max_messages,
            max_wait_s=w.max_wait_s,
            token_budget=w.token_budget,
            bulk_max_messages=w.bulk_max_messages,
            bulk_token_budget=w.bulk_token_budget,
        )


@dataclass(frozen=True, slots=True)
class LoadFigures:
    """Requests through Kafka (or straight into the engine): rate, latency, batching."""

    requests: int
    results: int
    missing: int
    duration_s: float
    throughput_rps: float
    tokens_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    statuses: dict[str, int] = field(default_factory=dict)
    cache_hit_ratio: float = 0.0
    cache_levels: dict[str, int] = field(default_factory=dict)
    padding_ratio: float | None = None
    engine_batch_sizes: dict[str, int] = field(default_factory=dict)
    # micro-batch sizes as the worker took them from Kafka
    take_sizes: dict[str, int] = field(default_factory=dict)
    # engine call time over the run (a worker's own figures; None where not measured)
    engine_seconds: float | None = None
    # engine_seconds / duration_s: near 1, the engine never waited for the pipeline
    engine_busy_ratio: float | None = None
    offered_rps: float | None = None
    # where the machine's CPU went while the requests ran (the worker's engine, its loop,
    # everything else); None where not measured
    cpu: CpuUse | None = None
    # the router's process, where it runs apart from the worker
    router_cpu: CpuUse | None = None

    @classmethod
    def from_summary(cls, summary: dict[str, Any], **extra: Any) -> LoadFigures:
        """From :meth:`pipeline.bench.load.LoadReport.summary` plus bench-specific fields."""
        return cls(**summary, **extra)


@dataclass(frozen=True, slots=True)
class EngineFigures:
    """Raw engine throughput of one configuration."""

    batch_size: int | None
    compute_type: str
    sentences_per_s: float
    tokens_per_s: float
    input_tokens_per_s: float
    sentences: int
    seconds: float
    padding_ratio: float | None = None
    calls: int = 0
    # the cores the engine (this process) and everything else kept busy meanwhile
    cpu: CpuUse | None = None


@dataclass(frozen=True)
class BenchReport:
    """What every bench prints."""

    bench: str
    machine: Machine
    settings: RunSettings
    runs: dict[str, LoadFigures | EngineFigures | list[Any]]
    ratios: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def bracketed_rate(before: EngineFigures, after: EngineFigures) -> float:
    """Sentences/s of one workload's ceiling measured before and after another run (A-B-A).

    The mean time of the two: a drift of the machine's speed that is linear
    in time affects the run between them as it affects this mean.
    """
    if before.sentences != after.sentences:
        raise ValueError("before and after must measure the same workload")
    total_s = before.seconds + after.seconds
    return 2 * before.sentences / total_s if total_s else 0.0


def engine_core_rate(run: LoadFigures) -> float | None:
    """Requests per second per core the worker's engine kept busy; None where unmeasured."""
    cpu = run.cpu
    return run.throughput_rps / cpu.engine_cores if cpu is not None and cpu.engine_cores else None


def bracketed_core_rate(before: EngineFigures, after: EngineFigures) -> float | None:
    """Sentences per engine CPU second over a ceiling measured before and after (A-B-A)."""
    if before.cpu is None or after.cpu is None:
        return None
    core_s = before.cpu.engine_cores * before.seconds + after.cpu.engine_cores * after.seconds
    return (before.sentences + after.sentences) / core_s if core_s else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` rounded; None (JSON null) when either is unknown or the
    denominator is 0."""
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)
