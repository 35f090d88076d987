"""Replicas and call size on a GPU, chosen by measurement.

A CTranslate2 replica runs its calls one after the other, and between two
calls the device waits while the host prepares the next; a call's batch
alone does not keep a fast GPU busy. Several replicas (``inter_threads``,
each a copy of the model in the GPU's memory) overlap those gaps: on one
H200 the bench model made 888 sentences/s with one replica and the worker's
default call (4,096 tokens, 64 messages), 1,456 with two, 1,705 with four,
and 1,313 with six. So with ``engine.inter_threads`` unset on ``cuda`` the
worker times replica counts and call sizes (:func:`sweep`) and keeps the
cheapest within a few percent of the fastest (:func:`choose_plan`): fewest
replicas (memory), then the smallest call (latency). The plan is cached
with the engine profiles, so later starts on the same machine skip it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

# replica counts and call sizes (token budgets; a call holds budget // 64 messages at most,
# as the worker's defaults: 4,096 tokens and 64 messages) tried on a GPU
REPLICA_COUNTS: tuple[int, ...] = (1, 2, 3, 4)
TOKEN_BUDGETS: tuple[int, ...] = (4096, 16384)
TOKENS_PER_MESSAGE = 64
# a plan within this share of the fastest is as good (fewer replicas or smaller calls win)
TOLERANCE = 0.05


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """Sentences per second with ``replicas`` replicas and calls of ``token_budget`` tokens."""

    replicas: int
    token_budget: int
    sentences_per_s: float


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """What the engine runs with: replicas, the call size, and what was measured."""

    replicas: int
    token_budget: int
    points: list[SweepPoint] = field(default_factory=list)

    @property
    def max_messages(self) -> int:
        return max(1, self.token_budget // TOKENS_PER_MESSAGE)

    def to_json(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "token_budget": self.token_budget,
            "points": [asdict(p) for p in self.points],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplicaPlan:
        return cls(
            int(data["replicas"]),
            int(data["token_budget"]),
            [SweepPoint(**p) for p in data.get("points", [])],
        )


def choose_plan(points: Sequence[SweepPoint], tolerance: float = TOLERANCE) -> ReplicaPlan:
    """The fewest replicas, then the smallest calls, within ``tolerance`` of the fastest."""
    if not points:
        raise ValueError("no measurement to choose from")
    best = max(p.sentences_per_s for p in points)
    good = [p for p in points if p.sentences_per_s >= (1 - tolerance) * best]
    chosen = min(good, key=lambda p: (p.replicas, p.token_budget))
    return ReplicaPlan(chosen.replicas, chosen.token_budget, list(points))


def sweep(
    throughput: Callable[[int, int], float],
    replicas: Sequence[int] = REPLICA_COUNTS,
    budgets: Sequence[int] = TOKEN_BUDGETS,
) -> list[SweepPoint]:
    """``throughput(replicas, token_budget)`` at every combination."""
    return [SweepPoint(r, b, round(throughput(r, b), 1)) for r in replicas for b in budgets]


class ReplicatedModel(Protocol):
    """A model loaded with some replicas; one blocking call of ``n`` sequences."""

    def run(self, n: int, max_len: int) -> None: ...


def concurrent_throughput(
    model: ReplicatedModel,
    replicas: int,
    token_budget: int,
    *,
    seq_len: int = 24,
    seconds: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Sentences per second of ``replicas`` threads, each calling ``model`` with calls of
    ``token_budget`` tokens (``seq_len`` a sequence, at most budget // 64 sequences) for
    ``seconds``: every replica busy, as the worker keeps them (the calls release the GIL)."""
    n = max(1, min(token_budget // seq_len, token_budget // TOKENS_PER_MESSAGE))
    model.run(n, seq_len)  # warm-up: the first call pays for allocations
    done = [0] * replicas
    errors: list[BaseException] = []
    began = clock()

    def loop(slot: int) -> None:
        try:
            while clock() - began < seconds:
                model.run(n, seq_len)
                done[slot] += n
        except BaseException as exc:  # reported by the caller, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    elapsed = clock() - began
    return sum(done) / elapsed if elapsed > 0 else 0.0
