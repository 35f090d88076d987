"""Everything the worker needs from Faust beyond its public API, in one place.

Faust is the shell of the worker: it runs the consumer group, the agents, the
dedup tables and the web server. Seven things the worker needs are not public
API, and each use is here, with why:

* committing chosen offsets (``Consumer._commit``): the worker keeps its own
  offset book (``pipeline/kafka/offsets.py``) because Faust's acking can skip or
  stall around rebalances; Faust's own acking is off for the topics we consume;
* the current event of a table write (``faust.streams._current_event``): a
  table writes its changelog to the partition of the *current event*, which in
  a ``take_events`` batch is the last event buffered, not the one whose digest
  is written;
* the worker's signal handlers (``mode.Worker._on_sigterm`` / ``_on_sigint``):
  a stop first drains the running batch and commits it, then lets Faust stop;
* the worker's shutdown trigger (``mode.Worker._schedule_shutdown``);
* the producer's client settings (aiokafka driver ``Producer._settings_extra``):
  Faust turns on idempotence only for exactly-once (transactional) apps, and
  without it a produce retried after a leader change is written twice;
* the group coordinator's heartbeat (aiokafka's ``GroupCoordinator._do_heartbeat``,
  reached through Faust's consumer thread): a member cut off from the brokers
  is evicted after its session timeout but only learns so at its next answered
  heartbeat, and meanwhile aiokafka goes on delivering what it fetches for the
  partitions it lost. :class:`MembershipLease` times the answered heartbeats;
* the group coordinator's routine (aiokafka's ``GroupCoordinator._coordination_task``,
  through ``Consumer._thread._consumer``): when it ends on an error the consumer
  never joins the group again, so :func:`coordination_failure` lets the worker
  exit for its supervisor to restart it.

The offset book itself is ``pipeline/kafka/offsets.py`` (pure logic) and
``workers/offset_keeper.py`` (seeks, the commit task); it reaches Faust only
through :func:`commit_offsets` and :func:`tp_of` here.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import faust
from faust.streams import _current_event
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP, EventT, StreamT

from pipeline.contract.messages import Headers
from pipeline.errors import EXIT_TEMPFAIL
from pipeline.kafka.offsets import TopicPartition
from pipeline.kafka.records import Record

log = logging.getLogger(__name__)

# A Faust event of a raw-bytes topic (key and value are bytes).
Event = EventT[Any]


def micro_batches(
    stream: StreamT[Any], max_events: int, within_s: float
) -> AsyncIterator[Sequence[Event]]:
    """The agent's stream as micro-batches of events (``take_events``).

    ``StreamT`` does not declare ``take_events``; the stream Faust passes to an
    agent is a :class:`faust.Stream`, which has it. Faust acks the events it
    yields once the batch is handed back (even if it failed, faust-streaming
    #315); that is harmless here because the topics' acks are off and offsets
    are committed by the worker's own offset book.
    """
    return cast("faust.Stream[Any]", stream).take_events(max_events, within=within_s)


def record_of(event: Event) -> Record:
    """The raw record behind a Faust event (key, value and headers as bytes)."""
    message = event.message
    raw = event.headers or {}
    items = raw.items() if isinstance(raw, Mapping) else raw
    headers: Headers = [(k, v if isinstance(v, bytes) else str(v).encode()) for k, v in items]
    return Record(
        message.topic, message.partition, message.offset, message.key, message.value, headers
    )


def tp_of(event: Event) -> TopicPartition:
    return TopicPartition(event.message.topic, event.message.partition)


@contextmanager
def as_current_event(event: Event) -> Iterator[None]:
    """Make ``event`` the current event, so a table write goes to its partition's changelog."""
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


async def commit_offsets(app: faust.App, offsets: Mapping[TopicPartition, int]) -> bool:
    """Commit exactly these offsets for the app's group; False when not committed.

    Faust's public ``commit()`` commits what Faust itself acked, which for our
    topics is nothing (their acks are off); ``_commit`` sends the given
    offsets through the group member, after checking the partitions are still
    assigned.
    """
    tps = {TP(tp.topic, tp.partition): offset for tp, offset in offsets.items()}
    return bool(await cast(Any, app.consumer)._commit(tps))


class _IdempotentProducer(aiokafka_driver.Producer):
    """Faust's aiokafka producer with idempotence on (its transactional producer's hook).

    aiokafka retries a batch that failed with a retriable error. When the
    partition's leader moves (a broker restart, or the preferred-leader
    rebalance minutes after one), a produce waiting for its replicas fails
    with NotLeaderForPartition although the new leader already has the
    records; without producer ids and sequence numbers the retry writes them
    again. The chaos suite saw exactly that: the router's forwards of three
    requests reached the translation agent twice, answered from L1 and then,
    317 ms later, from the dedup window.
    """

    def _settings_extra(self) -> Mapping[str, Any]:
        return {**super()._settings_extra(), "acks": "all", "enable_idempotence": True}


def use_idempotent_producer(app: faust.App) -> None:
    """Make every record the app produces (results, forwards, changelogs) idempotent."""
    app.producer = _IdempotentProducer(app.transport, loop=app.loop, beacon=app.beacon)


def assigned_partitions(app: faust.App) -> set[TopicPartition]:
    return {TopicPartition(tp.topic, tp.partition) for tp in app.consumer.assignment()}


def coordination_failure(app: faust.App) -> BaseException | None:
    """The error that ended aiokafka's group coordination routine, if it ended.

    aiokafka logs "Unexpected error in coordinator routine" and stops taking
    part in the group (for instance on an assignment of a topic it does not
    subscribe to); the consumer then never joins again, so the worker must
    exit for its supervisor to restart it. None while coordination runs.
    """
    thread = cast(Any, app.consumer)._thread
    consumer = getattr(thread, "_consumer", None)
    coordinator = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_coordination_task", None)
    if task is None or not task.done() or task.cancelled():
        return None
    exc: BaseException | None = task.exception()
    return exc


class MembershipLease:
    """Whether the group has confirmed this member within a session timeout.

    Confirmed by every answered heartbeat and every assignment. Once lapsed the
    coordinator has evicted the member (or is about to): its partitions belong
    to another worker, and what it still fetched for them must not be processed.
    Written from Faust's consumer thread, read on the worker's loop (one float).
    """

    def __init__(
        self, session_timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._timeout = session_timeout_s
        self._clock = clock
        self._confirmed = clock()
        self._watched: Any = None

    def confirm(self) -> None:
        self._confirmed = self._clock()

    @property
    def lapsed_s(self) -> float:
        """Seconds since the session ran out (0 while it holds)."""
        return max(0.0, self._clock() - self._confirmed - self._timeout)

    def watch(self, app: faust.App) -> None:
        """Confirm at each answered heartbeat of the app's consumer (once per coordinator)."""
        consumer = cast(Any, app.consumer)._thread._ensure_consumer()
        coordinator = consumer._coordinator
        if coordinator is None or coordinator is self._watched:
            return
        beat = coordinator._do_heartbeat

        async def answered_heartbeat() -> bool:
            ok = bool(await beat())
            if ok:
                self.confirm()
            return ok

        coordinator._do_heartbeat = answered_heartbeat
        self._watched = coordinator


# libraries that log a line per service start, tables per rebalance, and every
# connection of a short-lived client at info
QUIET_LIBRARIES = ("faust", "mode", "aiokafka", "kafka")


class DrainingWorker(faust.Worker):
    """A Faust worker whose SIGTERM/SIGINT first drains and commits, within a bound.

    ``drain`` stops the agents from taking new batches, waits for the running
    ones and commits what they finished; then the ordinary Faust shutdown
    runs (leaving the group, closing clients). Whatever it waits on, the
    process exits within ``stop_timeout_s`` of the signal: a watchdog thread
    ends it (non-zero) if the stop hangs; unfinished work was not committed.
    """

    def __init__(
        self,
        app: faust.App,
        *,
        drain: Callable[[], Awaitable[None]],
        stop_timeout_s: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._drain = drain
        self._stop_timeout_s = stop_timeout_s
        self._stopping = False

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        """Below debug, the libraries log warnings only: the worker's own lines say what
        happens (started, joined, ready, faults), not every service start and the tables
        of topics Faust prints at each rebalance."""
        super().on_setup_root_logger(logger, level)
        if level > logging.DEBUG:
            for name in QUIET_LIBRARIES:
                logging.getLogger(name).setLevel(max(level, logging.WARNING))

    def _on_sigterm(self) -> None:
        self.stop_gracefully(signal.SIGTERM)

    def _on_sigint(self) -> None:
        self.stop_gracefully(signal.SIGINT)

    def stop_gracefully(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Drain, commit, then stop (idempotent)."""
        if self._stopping:
            return
        self._stopping = True
        log.info(
            "%s: finishing the running batches, then stopping (at most %.0fs)",
            sig.name,
            self._stop_timeout_s,
        )
        watchdog = threading.Timer(self._stop_timeout_s, self._overrun)
        watchdog.daemon = True
        watchdog.start()
        self.add_future(self._drain_then_stop(sig))

    def _overrun(self) -> None:
        log.error(
            "stop took longer than %.0fs; exiting now (unfinished batches were not "
            "committed and will be processed again)",
            self._stop_timeout_s,
        )
        logging.shutdown()
        os._exit(EXIT_TEMPFAIL)

    async def _drain_then_stop(self, sig: signal.Signals) -> None:
        try:
            await self._drain()
        finally:
            self._schedule_shutdown(sig)
