"""Running counters of one worker process, served as JSON for benchmarks and ops."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.steps.base import BatchStats


@dataclass
class WorkerStats:
    """Totals since start: routing outcomes, cache levels, engine batches, padding."""

    routes: Counter[str] = field(default_factory=Counter)
    # records taken from each consumed topic (admitted through the offset book)
    admitted: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    take_sizes: Counter[int] = field(default_factory=Counter)
    engine_batch_sizes: Counter[int] = field(default_factory=Counter)
    engine_texts: int = 0
    # wall time of engine calls: over a run's duration, how busy the engine was
    engine_seconds: float = 0.0
    # the engine calls' padded tokens (texts padded to each call's longest) and pad among them
    padded_tokens: int = 0
    pad_tokens: int = 0
    dead_letters: int = 0
    retried_attempts: int = 0

    def routed(self, kind: str) -> None:
        self.routes[kind] += 1

    def record(self, batch: BatchStats) -> None:
        self.take_sizes[batch.size] += 1
        self.cache.update(batch.by_cache)
        self.statuses.update(batch.by_status)
        self.dead_letters += batch.dead_letters
        self.retried_attempts += batch.attempts - 1
        for size in batch.engine_batches:
            self.engine_batch_sizes[size] += 1
        self.engine_texts += batch.engine_texts
        self.engine_seconds += batch.engine_seconds
        self.padded_tokens += batch.padded_tokens
        self.pad_tokens += batch.pad_tokens

    def snapshot(self) -> dict[str, Any]:
        return {
            "routes": dict(self.routes),
            "admitted": dict(self.admitted),
            "cache": dict(self.cache),
            "statuses": dict(self.statuses),
            "take_sizes": {str(k): v for k, v in sorted(self.take_sizes.items())},
            "engine_batch_sizes": {str(k): v for k, v in sorted(self.engine_batch_sizes.items())},
            "engine_texts": self.engine_texts,
            "engine_seconds": round(self.engine_seconds, 3),
            "dead_letters": self.dead_letters,
            "retried_attempts": self.retried_attempts,
            "padded_tokens": self.padded_tokens,
            "pad_tokens": self.pad_tokens,
            "padding_ratio": self.pad_tokens / self.padded_tokens if self.padded_tokens else 0.0,
        }
