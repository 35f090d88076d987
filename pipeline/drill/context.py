"""What a drill works on: a running stack, the workers it starts there, and their health.

:class:`DrillContext` holds the stack's settings (its layout: nodes, ports,
home), the client settings that reach it, and the drill's own workers (one
consumer group, stable and distinct instance ids, own ports). Scenarios read
and break what it holds; :meth:`DrillContext.heal` puts everything back
before the next one: every node and Redis running, every replica in sync,
every worker serving, the group settled.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.errors import KafkaError
from kafka.partitioner.default import murmur2
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, work_topic
from pipeline.drill.network import DrillGroup, NetworkCut, cut_unavailable
from pipeline.drill.sla_job import SlaJob
from pipeline.engine.registry import Registry
from pipeline.errors import BabelStreamError, StackError
from pipeline.kafka.check import admin_client
from pipeline.settings import DrillSettings, KafkaSettings, Settings
from pipeline.stack import layout, manager
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.stack.procs import PidFile, is_alive

log = logging.getLogger(__name__)

GROUP = "babelstream"


class DrillTimeout(BabelStreamError):
    """A drill step did not finish within its bound."""


def wait_until(done: Callable[[], bool], what: str, timeout_s: float, poll_s: float = 0.5) -> float:
    """Poll ``done`` until true; the seconds it took. :class:`DrillTimeout` past the bound."""
    began = time.monotonic()
    while not done():
        if time.monotonic() - began > timeout_s:
            raise DrillTimeout(f"{what}: not within {timeout_s:.0f}s")
        time.sleep(poll_s)
    return time.monotonic() - began


Assignment = dict[str, set[int]]


def assignment_of(readiness: Mapping[str, Any] | None) -> Assignment:
    """A readiness page's ``assigned`` partitions (empty when not ready)."""
    if not readiness or not readiness.get("ready"):
        return {}
    return {topic: set(parts) for topic, parts in readiness.get("assigned", {}).items()}


def holds(assignment: Assignment, wanted: Assignment) -> bool:
    """True when ``assignment`` includes every partition of ``wanted``."""
    return all(parts <= assignment.get(topic, set()) for topic, parts in wanted.items())


def settled(assignments: Iterable[Assignment], partitions: Mapping[str, int]) -> bool:
    """True when the members hold every partition of ``partitions`` exactly once."""
    counts = Counter((topic, p) for a in assignments for topic, parts in a.items() for p in parts)
    wanted = {(topic, p) for topic, n in partitions.items() for p in range(n)}
    return set(counts) == wanted and all(n == 1 for n in counts.values())


def busiest_leader(partitions: Iterable[Mapping[str, Any]]) -> int:
    """The node that leads most of a topic's partitions (``describe_topics`` entries)."""
    leaders = Counter(int(p["leader_id"]) for p in partitions if int(p["leader_id"]) >= 0)
    if not leaders:
        raise DrillTimeout("no partition of the topic has a leader")
    return min(leaders, key=lambda node: (-leaders[node], node))


def ingress_partition(pair: Pair, partitions: int) -> int:
    """The ``translate.requests`` partition of a pair's requests (keyed by pair id)."""
    return int(murmur2(pair.id.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class DrillContext:
    """A running stack and the drill's workers on it."""

    stack: Settings
    clients: Settings
    workers: list[WorkerProcess]
    env: dict[str, str]
    home: Path
    pair: Pair = DEMO_PAIR
    group: str = GROUP
    # set when the last worker runs in the drill group and can be cut off
    cut: NetworkCut | None = None
    cut_group: DrillGroup | None = None
    sla: SlaJob | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def work_topic(self) -> str:
        """The interactive work topic of the model serving the drill pair."""
        model = Registry.load(self.stack.engine.registry).model_for(self.pair)
        if model is None:
            raise StackError(f"no model serves the drill pair {self.pair.id}")
        return work_topic(model.model_id)

    @classmethod
    def open(
        cls, settings: Settings, *, workers: int, home: Path, isolate_last: bool = False
    ) -> DrillContext:
        """The stack ``up`` runs under ``settings.stack.home`` and ``workers`` not yet started.

        One-line :class:`StackError` when no stack runs there. With
        ``isolate_last`` the last worker runs in ``drill.cut_group`` so that
        it can be cut off (root and iptables needed).
        """
        stack = layout.with_layout(settings)
        statuses = manager.status(stack)
        down = [s.name for s in statuses if not s.healthy]
        if down:
            raise StackError(
                f"the stack under {stack.stack.home} is not running "
                f"({', '.join(down)} down): start it with `babelstream up "
                "--brokers 3` (and source its settings.env)"
            )
        clients = layout.client_settings(stack)
        env = {
            **layout.client_environment(stack),
            "BABELSTREAM_WORKER__DATA_DIR": str(home / "faust"),
        }
        ctx = cls(stack, clients, [], env, home)
        group = None
        if isolate_last:
            reason = cut_unavailable()
            if reason is not None:
                raise StackError(f"cannot cut a worker off: {reason}")
            ctx.cut_group = DrillGroup(settings.drill.cut_group)
            ports = [node.client for node in layout.node_ports(stack.stack)]
            ctx.cut = NetworkCut(ctx.cut_group.gid, ports)
            group = ctx.cut_group.gid
        for i in range(workers):
            ctx.workers.append(
                WorkerProcess(
                    clients,
                    log_path=home / "log" / f"worker-{i + 1}.log",
                    env=env,
                    instance_id=f"{socket.gethostname()}-drill-{i + 1}",
                    group=group if i == workers - 1 else None,
                )
            )
        return ctx

    @property
    def drill(self) -> DrillSettings:
        return self.clients.drill

    @property
    def kafka(self) -> KafkaSettings:
        return self.clients.kafka

    # --- workers -------------------------------------------------------------------

    @staticmethod
    def running(worker: WorkerProcess) -> bool:
        return worker.pid is not None and worker.returncode is None

    def start_workers(self, workers: Iterable[WorkerProcess] | None = None) -> float:
        """Start the given (default: every stopped) workers together; the seconds it took."""
        todo = [w for w in (self.workers if workers is None else workers) if not self.running(w)]
        began = time.monotonic()
        if todo:
            with ThreadPoolExecutor(len(todo)) as pool:
                for future in [pool.submit(w.start, self.drill.step_timeout_s) for w in todo]:
                    future.result()
        return time.monotonic() - began

    def epochs(self) -> dict[str, int | None]:
        """Each worker's assignment epoch (None: its readiness page did not answer)."""
        return {w.instance_id: (w.readiness() or {}).get("epoch") for w in self.workers}

    def assignments(self) -> list[Assignment]:
        return [assignment_of(w.readiness()) for w in self.workers]

    def router_of_pair(self) -> WorkerProcess:
        """The worker routing the drill pair's requests (or the first, if none is known)."""
        partitions = self.partition_counts([REQUESTS_TOPIC])[REQUESTS_TOPIC]
        wanted = ingress_partition(self.pair, partitions)
        for worker, assigned in zip(self.workers, self.assignments(), strict=True):
            if wanted in assigned.get(REQUESTS_TOPIC, set()):
                return worker
        return self.workers[0]

    def union(self, workers: Iterable[WorkerProcess]) -> Assignment:
        """Every partition the given workers say they hold."""
        union: Assignment = {}
        for worker in workers:
            for topic, parts in assignment_of(worker.readiness()).items():
                union.setdefault(topic, set()).update(parts)
        return union

    def is_settled(self) -> bool:
        """Every running worker is ready, and together they hold each partition once."""
        live = [assignment_of(w.readiness()) for w in self.workers if self.running(w)]
        if not live or not all(live):
            return False
        topics = sorted({topic for a in live for topic in a})
        return settled(live, self.partition_counts(topics))

    def wait_settled(self, what: str) -> float:
        return wait_until(self.is_settled, what, self.drill.step_timeout_s, poll_s=1.0)

    # --- Kafka ---------------------------------------------------------------------

    @retry(
        retry=retry_if_exception_type((KafkaError, OSError)),
        stop=stop_after_delay(30),
        wait=wait_fixed(0.5),
        reraise=True,
    )
    def describe(self, topics: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """``describe_topics`` partitions by topic (every topic when ``topics`` is None).

        Retried for a while: during a drill the node it asks may just have died.
        """
        admin = admin_client(self.kafka, "drill")
        try:
            return {t["name"]: t["partitions"] for t in admin.describe_topics(topics)}
        finally:
            admin.close()

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        return {name: len(parts) for name, parts in self.describe(topics).items()}

    def broker_pidfile(self, node_id: int) -> PidFile:
        name = layout.node_name(self.stack.stack, layout.node_ports(self.stack.stack)[node_id - 1])
        return PidFile(self.stack.stack.home / "run" / f"{name}.pid")

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one Kafka node (by its PID file) and wait until it is gone."""
        record = self.broker_pidfile(node_id).read()
        if record is None or not is_alive(record):
            raise StackError(f"Kafka node {node_id} is not running")
        os.kill(record.pid, signal.SIGKILL)
        wait_until(lambda: not is_alive(record), f"Kafka node {node_id} to exit", 30.0, 0.1)

    def in_sync(self) -> bool:
        """Every partition of every topic has a leader and all its replicas in sync."""
        return all(
            p["leader_id"] >= 0 and sorted(p["isr_nodes"]) == sorted(p["replica_nodes"])
            for parts in self.describe().values()
            for p in parts
        )

    def start_stack(self) -> float:
        """Start whatever node or Redis is not running; the seconds until all are healthy."""
        began = time.monotonic()
        manager.start_services(self.stack)
        return time.monotonic() - began

    # --- all of it -----------------------------------------------------------------

    def heal(self) -> None:
        """Everything back: nodes and Redis, replicas in sync, workers serving, group settled."""
        if self.cut is not None:
            self.cut.heal()
        self.start_stack()
        wait_until(self.in_sync, "every replica back in sync", self.drill.step_timeout_s, 1.0)
        self.start_workers()
        self.wait_settled("the drill's workers to settle in their group")

    def close(self) -> None:
        """Stop the workers and the SLA job; remove the cut and the drill group."""
        if self.cut is not None:
            self.cut.heal()
        if self.sla is not None:
            self.sla.stop()
            self.sla = None
        stoppers = [threading.Thread(target=w.stop) for w in self.workers if self.running(w)]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        if self.cut_group is not None:
            self.cut_group.remove()
