"""Which pair a bench measures, which registry serves it, and a worker started for it.

Every bench takes ``--pair``: a pair of the project's registry (the demo
model's ``en_en-XA``) or of the benchmark registry that ``babelstream models
build-bench`` writes under ``var/`` (``en_en-XB``). A bench that starts its
own worker refuses to run while another worker already consumes the pair's
topic or the ingress topic: it would measure whichever worker answers first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, work_topic
from pipeline.engine.registry import PairEntry, Registry
from pipeline.errors import ConfigError
from pipeline.kafka.groups import consumer_groups, delete_group, serving, start_group_at_end
from pipeline.kafka.topics import ensure_named, ensure_topics, model_topic_specs
from pipeline.settings import KafkaSettings, Settings
from pipeline.stack.local_worker import WorkerProcess


@dataclass(frozen=True)
class BenchTarget:
    """A pair to measure, its registry entry and the registry file that serves it."""

    entry: PairEntry
    registry: Path

    @property
    def pair_id(self) -> str:
        return self.entry.pair.id

    def settings(self, settings: Settings) -> Settings:
        """``settings`` with this target's registry (what a worker for it must load)."""
        engine = settings.engine.model_copy(update={"registry": self.registry})
        return settings.model_copy(update={"engine": engine})

    def env(self) -> dict[str, str]:
        """Environment for processes that serve this pair (worker, naive consumer)."""
        return {"BABELSTREAM_ENGINE__REGISTRY": str(self.registry)}


def resolve_target(settings: Settings, pair_id: str) -> BenchTarget:
    """The pair in the project's registry, else in the benchmark registry."""
    searched = []
    for path in (settings.engine.registry, settings.engine.bench_registry):
        searched.append(str(path))
        if not path.exists():
            continue
        registry = Registry.load(path)
        if registry.entry(Pair.parse(pair_id)) is not None:
            (entry,) = registry.entries([pair_id])
            return BenchTarget(entry, path)
    hint = " (build it with `babelstream models build-bench`)" if pair_id.endswith("XB") else ""
    raise ConfigError(f"pair {pair_id} is in neither {' nor '.join(searched)}{hint}")


def refuse_if_served(kafka: KafkaSettings, model_id: str, grace_s: float = 0.0) -> None:
    """ConfigError (one line) when another worker consumes the model's topic or the ingress.

    ``grace_s`` waits that long for the group to empty first: a static member of a
    worker that has just stopped stays assigned until its session times out.
    """
    deadline = time.monotonic() + grace_s
    while busy := _serving_groups(kafka, model_id):
        if time.monotonic() >= deadline:
            who = "; ".join(f"group {g} consumes {', '.join(t)}" for g, t in busy.items())
            raise ConfigError(
                f"another worker is running ({who}); stop it first, or the bench would "
                "measure whichever worker answers"
            )
        time.sleep(1.0)


def _serving_groups(kafka: KafkaSettings, model_id: str) -> dict[str, list[str]]:
    topics = {work_topic(model_id), REQUESTS_TOPIC}
    groups = consumer_groups(kafka, with_lag=False)
    return {g.group_id: sorted(g.topics & topics) for t in topics for g in serving(groups, t)}


def wait_drained(kafka: KafkaSettings, group_id: str, topic: str, limit_s: float) -> int:
    """Wait until ``group_id`` has consumed ``topic`` to its end; the records still left."""
    deadline = time.monotonic() + limit_s
    while True:
        lag = next(
            (g.lag.get(topic, 0) for g in consumer_groups(kafka) if g.group_id == group_id), 0
        )
        if lag == 0 or time.monotonic() > deadline:
            return lag
        time.sleep(1.0)


@contextmanager
def bench_worker(
    settings: Settings,
    target: BenchTarget,
    log_name: str,
    env: dict[str, str] | None = None,
    *,
    args: Sequence[str] = (),
    probe: bool = True,
) -> Iterator[WorkerProcess]:
    """A worker for the target pair alone, started for this bench and stopped after it.

    ``env`` adds settings for that worker only (``BABELSTREAM_...`` variables), ``args``
    options of ``babelstream worker`` (``--no-router``: then ``probe=False``, as a worker
    that does not route cannot answer a probe alone).
    """
    refuse_if_served(
        settings.kafka, target.entry.model_id, grace_s=settings.worker.session_timeout_s
    )
    ensure_topics(settings.kafka, model_topic_specs(settings.kafka, target.entry.model_id))
    log_path = settings.stack.home / "log" / log_name
    worker = WorkerProcess(
        settings,
        log_path=log_path,
        pairs=[target.pair_id],
        # dynamic membership: a bench worker leaves its group when it stops, so the
        # next bench does not find it there for a session timeout (static members stay)
        env={
            **target.env(),
            "BABELSTREAM_WORKER__STATIC_MEMBERSHIP": "false",
            **(env or {}),
        },
        probe_pair=target.entry.pair,
        args=args,
        probe=probe,
    )
    with worker:
        yield worker


@contextmanager
def bench_router(settings: Settings, target: BenchTarget, log_name: str) -> Iterator[WorkerProcess]:
    """A router of its own (``worker --router-only``) for a bench, routing by the target's
    registry, in a consumer group of its own that starts at the end of the ingress topic,
    so neither the deployment's router group nor requests left on the topic by others
    come into the measurement. The group is deleted after it."""
    group = f"{settings.worker.router_group}-bench-{uuid.uuid4().hex[:8]}"
    ensure_named(settings, REQUESTS_TOPIC)
    start_group_at_end(settings.kafka, group, REQUESTS_TOPIC)
    router = WorkerProcess(
        settings,
        log_path=settings.stack.home / "log" / log_name,
        env={
            **target.env(),  # the registry that names the model serving the target's pair
            "BABELSTREAM_WORKER__ROUTER_GROUP": group,
            "BABELSTREAM_WORKER__STATIC_MEMBERSHIP": "false",
        },
        args=["--router-only"],
        probe=False,
    )
    try:
        with router:
            yield router
    finally:
        delete_group(settings.kafka, group)
