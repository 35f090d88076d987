"""What every step of the hot path shares: the micro-batch, its items and the failure classes.

A micro-batch flows through a list of steps composed in one place
(``pipeline/steps/chains.py``). Each step reads the batch, resolves some of its
*pending* items and leaves the rest for the next step. Two failure classes are
kept apart everywhere:

* *input-caused*: the fault belongs to one request (undecodable, invalid, over
  a limit, a text the engine cannot translate even alone). The step resolves
  that item only, as a dead letter or an ``error`` result, and carries on.
* *transient*: the fault belongs to the infrastructure (Kafka, the dedup
  table, the engine as a whole). The step raises :class:`TransientError`; the
  runner retries the whole batch with backoff and nothing is committed past it.

Anything else a step raises is a fault no step anticipated: the runner sets
the request that causes it apart (``pipeline/steps/batch_runner.py``), so it can
never stop a pair. A step that writes outside the batch (Kafka, Redis,
metrics, traces) or reads state kept per consumed record says so with a
class attribute ``in_canary = False``: the runner's canary request skips it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pipeline.contract.messages import (
    CacheLevel,
    DeadLetter,
    Status,
    TranslationRequest,
    TranslationResult,
    now_ms,
)
from pipeline.errors import EXIT_TEMPFAIL, BabelStreamError
from pipeline.kafka.records import Outgoing, Record

# how often a step waiting for a control feed looks again
READY_POLL_S = 0.05

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from pipeline.fidelity.glossary import Glossary
    from pipeline.storage.cache import CachedTranslation


class TransientError(BabelStreamError):
    """An infrastructure fault: retry the batch later; never a result for the request."""


class RetryBudgetExhausted(BabelStreamError):
    """Transient faults outlasted the retry budget: the worker must exit and rebalance."""

    exit_code = EXIT_TEMPFAIL


@dataclass(slots=True)
class Item:
    """One record of a micro-batch and what the steps decided for it so far.

    Pending until it holds a ``result`` or a ``dead_letter``. On the way,
    ``translation``/``cache`` (found or translated) or ``error``/``reason``
    (an input-caused failure) are filled in, and ``leader`` points to an
    earlier item of the same batch with the same digest (in-batch dedup).
    """

    record: Record
    request: TranslationRequest | None = None
    digest: str | None = None
    leader: Item | None = None
    translation: CachedTranslation | None = None
    cache: CacheLevel | None = None
    error: str | None = None
    reason: str | None = None
    engine_batch_size: int | None = None
    result: TranslationResult | None = None
    dead_letter: DeadLetter | None = None
    span: Span | None = None
    # the glossary (named + inline terms) the fidelity steps apply to this request
    glossary: Glossary | None = None

    @property
    def pending(self) -> bool:
        return self.result is None and self.dead_letter is None

    @property
    def unanswered(self) -> bool:
        """Pending, not a copy of another item, and nothing found or failed yet."""
        return (
            self.pending and self.leader is None and self.translation is None and self.error is None
        )


@dataclass
class BatchStats:
    """What one micro-batch did, for metrics, the stats page and benchmarks."""

    size: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    by_cache: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    engine_texts: int = 0
    engine_batches: list[int] = field(default_factory=list)
    # the planned calls' tokens: every call pads its texts to its longest one
    padded_tokens: int = 0
    pad_tokens: int = 0
    # time inside the engine and the tokens it read / wrote (for tokens/s)
    engine_seconds: float = 0.0
    # what the planner's cost model expected those calls to take (adaptive batching
    # corrects its estimates by engine_seconds over this)
    engine_estimated_s: float = 0.0
    engine_input_tokens: int = 0
    engine_output_tokens: int = 0
    attempts: int = 1


def _nothing() -> None:
    """A cue no one listens to."""


@dataclass(frozen=True)
class AgentCues:
    """What a batch tells the agent that runs it, so the agent's next batch can start early.

    ``hand_off``: the batch is done with the engine (the hand-off step); what
    follows waits on Redis and Kafka, so the next batch may take the engine
    meanwhile. ``last_call_started``: the batch's last engine call got the
    engine; an agent with more work waiting may start its next batch then, so
    that batch's lookups and tokenising overlap this call instead of leaving
    the engine idle.
    """

    hand_off: Callable[[], None] = _nothing
    last_call_started: Callable[[], None] = _nothing


# the cues of a batch whose agent waits for it to end
NO_CUES = AgentCues()


@dataclass
class Batch:
    """One micro-batch of one topic, as the steps see it: requests of every pair the
    topic's model serves (``model_id``: the model, "" for the router's batches)."""

    items: list[Item]
    model_id: str
    worker: str
    clock: Callable[[], int] = now_ms
    started_at: int = 0
    began: float = field(default_factory=time.perf_counter)
    stats: BatchStats = field(default_factory=BatchStats)
    outgoing: list[Outgoing] = field(default_factory=list)
    # a span for the whole batch (linked to every request), set by the tracing step
    span: Span | None = None
    # what the batch tells its agent about its engine calls (set by the runner)
    cues: AgentCues = field(default=NO_CUES, repr=False)

    def __post_init__(self) -> None:
        self.started_at = self.started_at or self.clock()
        self.stats.size = len(self.items)

    @classmethod
    def of(cls, records: list[Record], *, model_id: str, worker: str) -> Batch:
        """A fresh batch of pending items, one per record."""
        return cls([Item(record) for record in records], model_id, worker)

    def pending(self) -> list[Item]:
        return [item for item in self.items if item.pending]

    def unanswered(self) -> list[Item]:
        return [item for item in self.items if item.unanswered]

    def count_outcomes(self) -> None:
        """Count the items' results and dead letters into ``stats`` (for metrics)."""
        stats = self.stats
        for item in self.items:
            if item.dead_letter is not None:
                stats.dead_letters += 1
            if item.result is not None:
                result = item.result
                stats.by_status[result.status] = stats.by_status.get(result.status, 0) + 1
                if result.status == "ok" and result.cache:
                    stats.by_cache[result.cache] = stats.by_cache.get(result.cache, 0) + 1

    def resolve(self, item: Item, status: Status, **fields: Any) -> None:
        """Give ``item`` its one result (it must carry a decoded request)."""
        assert item.request is not None, "only decoded requests get results"
        item.result = TranslationResult.for_request(
            item.request,
            status=status,
            completed_at=self.clock(),
            worker=self.worker,
            started_at=self.started_at,
            **fields,
        )


# names of what a step reads and sets: Item fields, and ``outgoing`` (the batch's records)
Fields = frozenset[str]
# what every batch starts with: its items' records
GIVEN: Fields = frozenset({"record"})


class Step(Protocol):
    """One stage of the hot path: resolves some pending items of the batch in place.

    ``reads`` and ``sets`` say which :class:`Item` fields (and ``outgoing``) it
    reads and fills in; a chain refuses at start a step that reads what no step
    before it sets (:func:`check_order`). Raises :class:`TransientError` for
    infrastructure faults; never raises for a bad request (that request is
    resolved instead).
    """

    reads: ClassVar[Fields]
    sets: ClassVar[Fields]

    async def __call__(self, batch: Batch) -> None: ...


class ChainOrderError(ValueError):
    """A chain with a step before the steps that set what it reads (a programming error)."""


def check_order(steps: Sequence[Step], given: Fields = GIVEN) -> None:
    """ChainOrderError unless each step's ``reads`` are ``given`` or set by an earlier step:
    a step placed before them would find nothing to work on and silently do nothing."""
    known = set(given)
    for position, step in enumerate(steps):
        missing = sorted(step.reads - known)
        if missing:
            before = ", ".join(type(s).__name__ for s in steps[:position]) or "nothing"
            raise ChainOrderError(
                f"{type(step).__name__} reads {', '.join(missing)}, which no step before it "
                f"sets (before it: {before})"
            )
        known |= step.sets


class ControlFeed(Protocol):
    """A registry a worker fills from a compacted control topic (cancels, quarantine)."""

    @property
    def ready(self) -> bool:
        """Whether the topic has been read up to where it stood when the worker started."""
        ...


async def wait_until_read(feed: ControlFeed, wait_s: float, topic: str) -> None:
    """Wait up to ``wait_s`` until ``feed`` is ready; raise TransientError if it is not.

    A control record published before a restart must not be missed, and the
    feed catches up within moments of start.
    """
    deadline = time.monotonic() + wait_s
    while not feed.ready and time.monotonic() < deadline:
        await asyncio.sleep(READY_POLL_S)
    if not feed.ready:
        raise TransientError(f"{topic} has not been read up to its end yet")


def runs_in_canary(step: Step) -> bool:
    """Whether the runner's canary request goes through ``step`` (its ``in_canary``)."""
    return bool(getattr(step, "in_canary", True))
