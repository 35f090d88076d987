"""Chaos scenarios: one fault injected mid-stream and healed, every request accounted for.

A scenario is a few small named functions over a :class:`DrillContext`:
``inject`` breaks something and heals it (blocking, each step bounded),
optionally ``prepare``/``cleanup`` around the traffic and ``verify`` for
checks of its own. :func:`run_scenario` drives one:

1. heal the context (every node, Redis and worker up, the group settled);
2. paced traffic (``drill.rate`` requests/s for ``drill.seconds``; unique ids;
   acks=all, idempotent producer; every ``drill.repeat_every``-th request
   repeats an earlier text);
3. after ``drill.fault_at`` of it, ``inject`` (the fault, then the heal);
4. after the traffic, ``drill.after_heal_s`` more of repeats of texts that
   were answered before the fault (caches and dedup tables must answer them);
5. the tail: results for every acknowledged id, commits up to the log end
   (each bounded), then :func:`~pipeline.drill.reconcile.reconcile` by id.

The :class:`DrillReport` lists what broke a guarantee in ``problems``: a
missing result, an ``error`` result (or any status but ``ok``), a duplicate
where at-least-once gives none, commits short of the log end, a repeat the
model translated again where a scenario says the caches must answer, and
the scenario's own checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.contract.messages import TranslationResult, now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC
from pipeline.drill.context import (
    DrillContext,
    DrillTimeout,
    assignment_of,
    busiest_leader,
    holds,
    wait_until,
)
from pipeline.drill.reconcile import (
    Reconciliation,
    ResultTally,
    committed_lag,
    reconcile,
    wait_committed,
)
from pipeline.drill.sla_job import SlaJob, WindowCheck, check_windows
from pipeline.drill.traffic import PacedTraffic
from pipeline.errors import BabelStreamError
from pipeline.stack import manager


class DrillUnavailable(BabelStreamError):
    """This scenario cannot run here (the reason says why)."""


@dataclass
class FaultLog:
    """When the fault began and was healed (epoch ms) and what the scenario measured."""

    started_ms: int
    healed_ms: int = 0
    measures: dict[str, float] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def took(self, name: str, seconds: float) -> None:
        self.measures[name] = round(seconds, 1)


@dataclass(frozen=True)
class Evidence:
    """What the runner collected, for a scenario's own checks."""

    fault: FaultLog
    traffic_started_ms: int
    # every result read during the drill, whatever its id (duplicates kept)
    results: Mapping[str, list[TranslationResult]]


@dataclass(frozen=True)
class Verdict:
    """A scenario's own checks: figures for the report, and what failed."""

    details: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _nothing(_ctx: DrillContext) -> None:
    return None


def _no_checks(_ctx: DrillContext, _evidence: Evidence) -> Verdict:
    return Verdict()


def _always(_ctx: DrillContext) -> str | None:
    return None


@dataclass(frozen=True)
class Scenario:
    """One fault and its heal, with what the drill may expect of it."""

    name: str
    summary: str
    inject: Callable[[DrillContext, FaultLog], None]
    prepare: Callable[[DrillContext], None] = _nothing
    verify: Callable[[DrillContext, Evidence], Verdict] = _no_checks
    cleanup: Callable[[DrillContext], None] = _nothing
    # no consumer loses uncommitted work, so at-least-once delivers each result once,
    # unless the group rebalanced anyway (a session lapsed under load): then the
    # batches in flight are read again by design, and duplicates are allowed
    no_duplicates: bool = False
    # repeats sent after the heal must come from the window or a cache, never the model
    repeats_must_hit: bool = False
    # why it cannot run on this context (None: it can)
    unavailable: Callable[[DrillContext], str | None] = _always
    # the last worker must run in the drill group (to be cut off)
    isolates_worker: bool = False
    # traffic lasts this many times drill.seconds (a fault that waits for something)
    traffic_factor: float = 1.0


@dataclass(frozen=True)
class DrillReport:
    """The reconciliation of one scenario, with its timings and what broke."""

    scenario: str
    reconciliation: Reconciliation
    failed_sends: int
    fault_s: float
    # from the fault to the first result of a request sent after it began
    fault_to_first_result_ms: int | None
    measures: dict[str, float]
    notes: dict[str, Any]
    # cache level -> results, of the repeats sent after the heal
    repeats: dict[str, int]
    final_lag: dict[str, int]
    # a worker's assignment epoch changed while the scenario ran (or could not be read)
    rebalanced: bool
    # records of the input topics not yet committed when the fault began
    uncommitted_at_fault: int
    checks: dict[str, Any]
    problems: list[str]
    wall_s: float
    # 1-minute load average when the drill began, and the machine's cores
    load: float
    cores: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            **self.reconciliation.to_dict(),
            "failed_sends": self.failed_sends,
            "fault_s": self.fault_s,
            "fault_to_first_result_ms": self.fault_to_first_result_ms,
            "measures": self.measures,
            "notes": self.notes,
            "repeats": self.repeats,
            "final_lag": self.final_lag,
            "rebalanced": self.rebalanced,
            "uncommitted_at_fault": self.uncommitted_at_fault,
            "checks": self.checks,
            "problems": self.problems,
            "wall_s": self.wall_s,
            "load": self.load,
            "cores": self.cores,
        }


def repeating_text(every: int, lag: int) -> Callable[[str, int], str]:
    """Request texts: unique, except every ``every``-th repeats the one ``lag`` requests back."""

    def origin(i: int) -> int:
        while every and i >= lag and i % every == every - 1:
            i -= lag
        return i

    def text(marker: str, i: int) -> str:
        return f"Drill {marker} request {origin(i)}."

    return text


def first_result_after(
    started_ms: int, sent: Mapping[str, int], first_seen: Mapping[str, int]
) -> int | None:
    """Ms from ``started_ms`` to the first result of a request sent at or after it."""
    after = [first_seen[rid] for rid, at in sent.items() if at >= started_ms and rid in first_seen]
    return min(after) - started_ms if after else None


def _wait_event(event: Any, what: str, timeout_s: float) -> None:
    if not event.wait(timeout_s):
        raise DrillTimeout(f"{what}: not within {timeout_s:.0f}s")


def _join(traffic: PacedTraffic, what: str, timeout_s: float) -> None:
    traffic.join(timeout_s)
    if traffic.sending:
        raise DrillTimeout(f"{what}: still sending after {timeout_s:.0f}s")


def run_scenario(ctx: DrillContext, scenario: Scenario) -> DrillReport:
    """Traffic, the scenario's fault and heal, the tail; the reconciliation by request id."""
    reason = scenario.unavailable(ctx)
    if reason is not None:
        raise DrillUnavailable(f"{scenario.name}: {reason}")
    d = ctx.drill
    began, load = time.monotonic(), os.getloadavg()[0]
    ctx.heal()
    count = round(d.rate * d.seconds * scenario.traffic_factor)
    inputs = [REQUESTS_TOPIC, ctx.work_topic]
    text = repeating_text(d.repeat_every, max(1, round(d.rate * d.repeat_lag_s)))
    traffic = PacedTraffic(
        ctx.kafka, ctx.pair, count=count, rate=d.rate, timeout_ms=d.request_timeout_ms, text=text
    )
    with ResultTally(ctx.kafka, marker="") as tally:
        try:
            scenario.prepare(ctx)
            epochs = ctx.epochs()
            traffic.start()
            _wait_event(
                traffic.when_acked(max(1, round(count * d.fault_at))),
                "traffic to reach the fault",
                d.step_timeout_s,
            )
            # what a consumer that dies now has not committed: the duplicates it may cause
            uncommitted = sum(committed_lag(ctx.kafka, ctx.group, inputs).values())
            fault = FaultLog(now_ms())
            scenario.inject(ctx, fault)
            fault.healed_ms = now_ms()
            _join(traffic, "the traffic", count / d.rate + d.step_timeout_s)
            repeats = _after_heal(ctx, traffic, text, tally.first_seen(), fault.started_ms)
            acked = {**traffic.acked, **repeats.acked}
            tally.wait_for(acked, d.tail_timeout_s)
            lag = wait_committed(ctx.kafka, ctx.group, inputs, d.commit_timeout_s)
            rebalanced = ctx.epochs() != epochs
            results = tally.snapshot()
            verdict = scenario.verify(ctx, Evidence(fault, traffic.started_at_ms, results))
        finally:
            scenario.cleanup(ctx)
        first_seen = tally.first_seen()
    report = reconcile(acked, results, (fault.started_ms, fault.healed_ms))
    repeat_levels = Counter(str(results[rid][0].cache) for rid in repeats.acked if rid in results)
    problems = _problems(scenario, report, lag, repeat_levels, rebalanced) + verdict.problems
    return DrillReport(
        scenario=scenario.name,
        reconciliation=report,
        failed_sends=len(traffic.failed) + len(repeats.failed),
        fault_s=round((fault.healed_ms - fault.started_ms) / 1000, 1),
        fault_to_first_result_ms=first_result_after(fault.started_ms, acked, first_seen),
        measures=fault.measures,
        notes=fault.notes,
        repeats=dict(repeat_levels),
        final_lag=lag,
        rebalanced=rebalanced,
        uncommitted_at_fault=uncommitted,
        checks=verdict.details,
        problems=problems,
        wall_s=round(time.monotonic() - began, 1),
        load=round(load, 1),
        cores=os.cpu_count() or 1,
    )


def _after_heal(
    ctx: DrillContext,
    traffic: PacedTraffic,
    text: Callable[[str, int], str],
    first_seen: Mapping[str, int],
    fault_ms: int,
) -> PacedTraffic:
    """Repeats of texts answered before the fault, sent (and acknowledged) after the heal."""
    d = ctx.drill
    answered = [
        text(traffic.marker, i)
        for i in range(len(traffic.acked))
        if first_seen.get(traffic.request_id(i), fault_ms) < fault_ms
    ]
    count = round(d.rate * d.after_heal_s) if answered else 0
    repeats = PacedTraffic(
        ctx.kafka,
        ctx.pair,
        count=count,
        rate=d.rate,
        timeout_ms=d.request_timeout_ms,
        marker=f"{traffic.marker}r",
        text=lambda _marker, i: answered[i % len(answered)],
    )
    repeats.start()
    _join(repeats, "the repeats after the heal", d.after_heal_s + d.step_timeout_s)
    return repeats


def _problems(
    scenario: Scenario,
    report: Reconciliation,
    lag: Mapping[str, int],
    repeats: Mapping[str, int],
    rebalanced: bool,
) -> list[str]:
    found = []
    if report.missing:
        found.append(
            f"{len(report.missing)} acknowledged requests got no result "
            f"(first: {report.missing[:3]})"
        )
    if report.error_results:
        found.append(f"{report.error_results} error results")
    if set(report.statuses) - {"ok"}:
        found.append(f"results other than ok: {report.statuses}")
    if scenario.no_duplicates and report.duplicates and not rebalanced:
        found.append(f"{report.duplicates} duplicate results where at-least-once gives none")
    if any(lag.values()):
        found.append(f"commits did not reach the log end: {dict(lag)}")
    if scenario.repeats_must_hit and repeats.get("miss"):
        found.append(
            f"{repeats['miss']} repeats after the heal were translated again "
            f"(cache levels {dict(repeats)})"
        )
    return found


def append_report(path: Path, report: DrillReport) -> None:
    """Append one JSON line (the table the issue note shows is built from these)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(report.to_dict(), sort_keys=True) + "\n")


# --- the faults ----------------------------------------------------------------------


def kill_router_worker(ctx: DrillContext, fault: FaultLog) -> None:
    """SIGKILL the worker that routes the drill pair; the survivor takes its partitions
    after the session timeout (``failover_s``); then restart it (``rejoin_s``)."""
    victim = ctx.router_of_pair()
    survivors = [w for w in ctx.workers if w is not victim]
    held = assignment_of(victim.readiness())
    fault.notes["killed"] = victim.instance_id
    began = time.monotonic()
    victim.kill()
    wait_until(
        lambda: holds(ctx.union(survivors), held),
        "the surviving workers to take over the killed worker's partitions",
        ctx.drill.step_timeout_s,
    )
    fault.took("failover_s", time.monotonic() - began)
    fault.took("rejoin_s", ctx.start_workers([victim]))


def kill_pair_leader_broker(ctx: DrillContext, fault: FaultLog) -> None:
    """SIGKILL the node leading most of the pair's work topic's partitions; restart it after
    ``drill.outage_s`` (``leaders_moved_s``, ``restart_s``, ``in_sync_s``)."""
    topic = ctx.work_topic
    node = busiest_leader(ctx.describe([topic])[topic])
    fault.notes["broker"] = node
    began = time.monotonic()
    ctx.kill_broker(node)
    fault.took(
        "leaders_moved_s",
        wait_until(
            lambda: all(p["leader_id"] not in (-1, node) for p in ctx.describe([topic])[topic]),
            f"new leaders for {topic}",
            ctx.drill.step_timeout_s,
        ),
    )
    time.sleep(max(0.0, ctx.drill.outage_s - (time.monotonic() - began)))
    fault.took("restart_s", ctx.start_stack())
    fault.took(
        "in_sync_s",
        wait_until(ctx.in_sync, "every replica back in sync", ctx.drill.step_timeout_s, 1.0),
    )


def kill_all_workers(ctx: DrillContext, fault: FaultLog) -> None:
    """SIGKILL every worker, then start them again (``restart_s``: until all serve)."""
    for worker in ctx.workers:
        worker.kill()
    fault.took("restart_s", ctx.start_workers())


def redis_outage(ctx: DrillContext, fault: FaultLog) -> None:
    """Stop Redis for ``drill.outage_s``, then start it again (``restart_s``)."""
    manager.down(ctx.stack, names=["redis"])
    time.sleep(ctx.drill.outage_s)
    fault.took("restart_s", ctx.start_stack())


def start_sla_job(ctx: DrillContext) -> None:
    """A fresh SLA job on a checkpoint of its own, read back from its sink topic."""
    ctx.sla = SlaJob(ctx.env, ctx.home / "sla" / f"{now_ms()}", ctx.drill, ctx.kafka, ctx.pair.id)
    ctx.notes["sla_start_s"] = round(ctx.sla.start(ctx.drill.step_timeout_s), 1)
    ctx.notes["sla_running_ms"] = now_ms()


def kill_sla_job(ctx: DrillContext, fault: FaultLog) -> None:
    """Once the SLA job has emitted a window of the drill's results, SIGKILL it (the fault
    starts there) and restart it on its checkpoint (``restart_s``: until its first
    micro-batch)."""
    assert ctx.sla is not None, "start_sla_job prepares the job"
    windows, since = ctx.sla.windows, ctx.notes.pop("sla_running_ms")
    wait_until(
        lambda: any(w.window_start >= since for w in windows.snapshot()),
        "the SLA job's first window of the drill",
        ctx.drill.step_timeout_s,
    )
    fault.started_ms = now_ms()
    fault.notes["windows_before_kill"] = len(windows.snapshot())
    ctx.sla.kill()
    fault.took("restart_s", ctx.sla.start(ctx.drill.step_timeout_s))
    fault.notes["first_start_s"] = ctx.notes.pop("sla_start_s", None)


def check_sla_windows(ctx: DrillContext, evidence: Evidence) -> Verdict:
    """Every window the watermark closed is on ``translate.sla`` once, with its count."""
    assert ctx.sla is not None, "start_sla_job prepares the job"
    d, windows = ctx.drill, ctx.sla.windows
    completed = [
        r.completed_at
        for results in evidence.results.values()
        for r in results
        if r.pair == ctx.pair.id
    ]

    def check() -> WindowCheck:
        return check_windows(
            windows.snapshot(),
            completed,
            since_ms=evidence.traffic_started_ms,
            window_ms=round(d.sla_window_s * 1000),
            watermark_ms=round(d.sla_watermark_s * 1000),
        )

    with contextlib.suppress(DrillTimeout):  # what never came is reported as missing
        wait_until(
            lambda: not check().missing,
            "the SLA job to emit every closed window",
            d.step_timeout_s,
            1.0,
        )
    time.sleep(2 * d.sla_window_s)  # a window emitted twice would show up by now
    result = check()
    return Verdict({"sla_windows": result.to_dict()}, result.problems())


def stop_sla_job(ctx: DrillContext) -> None:
    if ctx.sla is not None:
        ctx.sla.stop()
        ctx.sla = None


def cut_off_worker(ctx: DrillContext, fault: FaultLog) -> None:
    """Drop what the isolated worker sends to the brokers for ``drill.cut_s``: the others
    take its partitions (``moved_s``); healed, it rejoins (``rejoin_s``)."""
    assert ctx.cut is not None, "the context isolates its last worker"
    victim = ctx.workers[-1]
    others = ctx.workers[:-1]
    held = assignment_of(victim.readiness())
    fault.notes["cut"] = victim.instance_id
    fault.notes["cut_worker"] = (victim.readiness() or {}).get("worker")
    began = time.monotonic()
    with ctx.cut.active():
        fault.took(
            "moved_s",
            wait_until(
                lambda: holds(ctx.union(others), held),
                "the other workers to take over the cut-off worker's partitions",
                ctx.drill.cut_s + ctx.drill.step_timeout_s,
            ),
        )
        time.sleep(max(0.0, ctx.drill.cut_s - (time.monotonic() - began)))
    fault.notes["cut_healed_ms"] = now_ms()
    fault.took(
        "rejoin_s",
        wait_until(
            lambda: bool(assignment_of(victim.readiness())) and ctx.is_settled(),
            "the cut-off worker to rejoin its group",
            ctx.drill.step_timeout_s,
            1.0,
        ),
    )
    fault.notes["still_running"] = ctx.running(victim)


def evicted_replays(
    results: Mapping[str, list[TranslationResult]], worker: str, since_ms: int
) -> int:
    """Results ``worker`` completed from ``since_ms`` on that another worker had written first."""
    return sum(
        1
        for copies in results.values()
        for r in copies[1:]
        if r.worker == worker and r.completed_at >= since_ms and copies[0].worker != worker
    )


def check_evicted_replays(ctx: DrillContext, evidence: Evidence) -> Verdict:
    """Once the cut heals, the cut-off worker learns at its next heartbeat that the group
    evicted it; until then it must not process the partitions that moved (their new owner
    did). What it may legitimately repeat of another worker's results after the heal is one
    micro-batch that was in flight at the rejoin's rebalance (``worker.max_messages``)."""
    notes = evidence.fault.notes
    worker, healed = str(notes["cut_worker"]), int(notes["cut_healed_ms"])
    replays = evicted_replays(evidence.results, worker, healed)
    problems = []
    if replays > ctx.clients.worker.max_messages:
        problems.append(
            f"after the cut healed, the cut-off worker {worker} wrote {replays} results that "
            "other workers had already written: it processed partitions it had been evicted "
            "from before it noticed (at-least-once holds; the work is done twice)"
        )
    return Verdict({"evicted_replays": replays}, problems)


def _needs_two_workers(ctx: DrillContext) -> str | None:
    if len(ctx.workers) < 2:
        return f"needs 2 workers or more to move partitions to (this drill: {len(ctx.workers)})"
    return None


def _cut_unavailable(ctx: DrillContext) -> str | None:
    if ctx.cut is None:
        return (
            "no worker runs in the drill group (needs root and iptables; see "
            "pipeline/drill/network.py)"
        )
    return _needs_two_workers(ctx)


def _needs_replicas(ctx: DrillContext) -> str | None:
    kafka = ctx.kafka
    if ctx.stack.stack.brokers < 2 or kafka.replication_factor < 2:
        return (
            "needs a cluster whose topics survive a node: `babelstream up --brokers 3` "
            f"(this stack: {ctx.stack.stack.brokers} node(s), replication "
            f"{kafka.replication_factor})"
        )
    return None


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "kill-worker",
            "SIGKILL the worker routing the pair; the survivor takes over, then it restarts",
            kill_router_worker,
            unavailable=_needs_two_workers,
        ),
        Scenario(
            "kill-broker",
            "SIGKILL the broker leading the pair's work topic; restart it after the outage",
            kill_pair_leader_broker,
            unavailable=_needs_replicas,
        ),
        Scenario(
            "kill-all-workers",
            "SIGKILL every worker and restart them: tables from "
            "changelogs, repeats answered by window/caches",
            kill_all_workers,
            repeats_must_hit=True,
        ),
        Scenario(
            "redis-down", "Redis down for the outage, then back", redis_outage, no_duplicates=True
        ),
        Scenario(
            "kill-sla-job",
            "SIGKILL the SLA job and restart it on its checkpoint: no window lost or emitted twice",
            kill_sla_job,
            prepare=start_sla_job,
            verify=check_sla_windows,
            cleanup=stop_sla_job,
            no_duplicates=True,
            # under load Spark emits its first windows late: traffic must outlast the kill
            traffic_factor=2.0,
        ),
        Scenario(
            "cut-worker",
            "Cut one worker off the brokers (iptables), then heal: its partitions move, it rejoins",
            cut_off_worker,
            verify=check_evicted_replays,
            unavailable=_cut_unavailable,
            isolates_worker=True,
        ),
    )
}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise DrillUnavailable(f"no scenario {name!r}; scenarios: {', '.join(SCENARIOS)}") from None
