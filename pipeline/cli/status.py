"""What ``babelstream status`` reports beyond Kafka and Redis: topics, workers, the SLA job,
the dashboard.

* Topics: the project's topics that keep less replication than the cluster
  offers (fewer replicas than its default, or partitions not in sync on all
  of theirs), e.g. changelogs a worker created without the cluster's settings.
* Workers: every consumer group on ``translate.*`` topics (group id, state,
  members, assigned partitions, lag), and for each Faust member its
  ``/babelstream/ready`` page at the web URL it advertises in the group.
* SLA job: when it last wrote a window to its sink topic, and when its local
  checkpoint last committed a micro-batch (Spark's UI is off, so it has no
  port to ask).
* Dashboard: its ``/healthz`` page on the configured host and port.
* Gateway: its ``/babelstream/gateway`` page on the configured host and port
  (Kafka as it sees it, its reply topic, calls answered).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.cli.sla_run import run_state
from pipeline.kafka.check import admin_client
from pipeline.kafka.groups import Group, consumer_groups
from pipeline.kafka.topics import cluster_replication, is_project_topic, under_replicated
from pipeline.settings import Settings


@dataclass(frozen=True, slots=True)
class HttpProbe:
    """What one GET answered: ``status`` None when nothing answered."""

    url: str
    status: int | None
    body: Any = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.status is not None


def http_probe(url: str, timeout_s: float) -> HttpProbe:
    """GET ``url``; the JSON body when there is one (any status), or why nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return HttpProbe(url, response.status, _json(response.read()))
    except urllib.error.HTTPError as exc:
        return HttpProbe(url, exc.code, _json(exc.read()))
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return HttpProbe(url, None, error=str(reason))


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    """One line of ``babelstream status`` after Kafka and Redis."""

    name: str
    address: str
    running: bool
    detail: str
    info: dict[str, Any] = field(default_factory=dict)
    # the state column, when "running" / "-" does not fit (topics: ok / UNDER-REPLICATED)
    state: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def readiness(probe: HttpProbe) -> str:
    """A worker's readiness in words, from its ``/babelstream/ready`` page."""
    if not probe.answered:
        return f"web port not answering ({probe.error})"
    body = probe.body if isinstance(probe.body, dict) else {}
    if probe.status == 200 and body.get("ready"):
        return "ready"
    if probe.status == 503:
        return f"not ready: {body.get('reason', 'no reason given')}"
    return f"no readiness page (HTTP {probe.status})"


def engine_in_use(probe: HttpProbe) -> str | None:
    """What a worker's engine runs on, in words (``cuda float16, 4 replicas``), from its
    readiness page; None when it does not say (a router, an older worker)."""
    body = probe.body if isinstance(probe.body, dict) else {}
    engine = body.get("engine")
    if not isinstance(engine, dict) or "device" not in engine:
        return None
    types = sorted(set((engine.get("compute_types") or {}).values())) or ["unknown"]
    replicas = engine.get("replicas", "?")
    return f"{engine['device']} {'/'.join(types)}, {replicas} replica{'' if replicas == 1 else 's'}"


def _ranges(partitions: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out: list[str] = []
    for p in partitions:
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ",".join(out)


def worker_status(group: Group, timeout_s: float) -> ComponentStatus:
    """One consumer group: models, members with their partitions and readiness, lag."""
    members = []
    ready = 0
    for m in group.members:
        probe = http_probe(f"{m.url}/babelstream/ready", timeout_s) if m.url else None
        state = readiness(probe) if probe is not None else "not a Faust worker"
        engine = engine_in_use(probe) if probe is not None else None
        ready += state == "ready"
        members.append({**m.to_dict(), "readiness": state, "engine": engine})
    total_lag = sum(group.lag.values())
    lines = [
        f"\n    member {m['client_id']} at {m['url'] or m['host']}: {m['readiness']}; "
        + (f"engine {m['engine']}; " if m["engine"] else "")
        + ", ".join(f"{topic} {_ranges(ps)}" for topic, ps in m["assigned"].items())
        for m in members
    ]
    detail = (
        f"group {group.group_id} ({group.state}): members {len(members)}, ready {ready}, "
        f"models {', '.join(group.models) or 'none'}, lag {total_lag}" + "".join(lines)
    )
    return ComponentStatus(
        "worker",
        group.group_id,
        bool(members),
        detail,
        {**group.to_dict(), "members": members, "total_lag": total_lag},
    )


def topics(settings: Settings) -> ComponentStatus:
    """The project's topics against the replication the cluster offers."""
    admin = admin_client(settings.kafka, "status")
    try:
        cluster = cluster_replication(admin)
        described = admin.describe_topics()
    finally:
        admin.close()
    project = [t for t in described if is_project_topic(str(t["name"]))]
    short = under_replicated(project, cluster)
    offered = f"cluster: {cluster.describe()}"
    replicas = f"{cluster.replication_factor} replica{'s' * (cluster.replication_factor != 1)}"
    detail = (
        f"{len(short)} of {len(project)} project topics under-replicated ({offered}): "
        + "; ".join(f"{name} {how}" for name, how in sorted(short.items()))
        if short
        else f"{len(project)} project topics at {replicas} ({offered})"
    )
    return ComponentStatus(
        "topics",
        settings.kafka.bootstrap_servers,
        True,
        detail,
        {"project_topics": len(project), "under_replicated": short},
        state="UNDER-REPLICATED" if short else "ok",
    )


def workers(settings: Settings) -> list[ComponentStatus]:
    """Every worker group, or one line saying there is none."""
    groups = consumer_groups(settings.kafka)
    if not groups:
        return [
            ComponentStatus(
                "worker", "-", False, "not running (no consumer group on translate.* topics)"
            )
        ]
    return [worker_status(g, settings.stack.probe_timeout_s) for g in groups]


def _age(ms: float) -> str:
    return f"{max(0.0, time.time() - ms / 1000):.0f}s ago"


def sla_job(settings: Settings) -> ComponentStatus:
    """The SLA job, from its sink topic's newest record and its local checkpoint."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    sla = settings.sla
    admin = admin_client(settings.kafka, "status")
    try:
        partitions = admin.describe_topics([sla.sink_topic])[0]["partitions"]
        newest = admin.list_partition_offsets(
            {
                TopicPartition(sla.sink_topic, p["partition_index"]): OffsetSpec.MAX_TIMESTAMP
                for p in partitions
            }
        )
    finally:
        admin.close()
    last_window = max((o.timestamp for o in newest.values()), default=-1)
    commits = sla.checkpoint_dir / "commits"
    batches = [f.stat().st_mtime for f in commits.iterdir()] if commits.is_dir() else []
    parts = [
        f"last window on {sla.sink_topic} {_age(last_window)}"
        if last_window >= 0
        else f"no window on {sla.sink_topic} yet"
    ]
    parts.append(
        f"checkpoint {sla.checkpoint_dir}: last micro-batch {_age(max(batches) * 1000)}"
        if batches
        else f"no checkpoint at {sla.checkpoint_dir}"
    )
    marked = run_state(sla.checkpoint_dir)
    if marked.running is not None:  # `babelstream sla` marks its runs: running or stopped
        running = marked.running
        state = ("running (" if running else "not running (") + marked.detail + "): "
    else:
        # a run no marker describes: one trigger plus the watermark can pass without
        # output; twice that is quiet
        recent_s = 2 * (sla.trigger_s + sla.watermark_s + sla.window_s)
        running = bool(batches) and time.time() - max(batches) < recent_s
        state = "active: " if running else "not running or idle: "
    return ComponentStatus(
        "sla",
        sla.sink_topic,
        running,
        state + "; ".join(parts),
        {
            "last_window_ms": last_window if last_window >= 0 else None,
            "last_batch_ms": round(max(batches) * 1000) if batches else None,
        },
    )


def _served(
    name: str, url: str, path: str, timeout_s: float, describe: Callable[[dict[str, Any]], str]
) -> ComponentStatus:
    """A component with a status page: ``describe(its JSON)``, or "not running"."""
    probe = http_probe(f"{url}{path}", timeout_s)
    if not probe.answered:
        return ComponentStatus(name, url, False, f"not running ({probe.error})")
    body = probe.body if isinstance(probe.body, dict) else {}
    return ComponentStatus(name, url, True, describe(body), body)


def _dashboard_line(body: dict[str, Any]) -> str:
    following = "following" if body.get("following") else "waiting for"
    return f"serving; {following} {body.get('topic')}, {body.get('records', 0)} windows read"


def dashboard(settings: Settings) -> ComponentStatus:
    """The dashboard, if its ``/healthz`` answers."""
    d = settings.dashboard
    url = f"http://{d.host}:{d.port}"
    return _served("dashboard", url, "/healthz", settings.stack.probe_timeout_s, _dashboard_line)


def _gateway_line(body: dict[str, Any]) -> str:
    if "reply_topic" not in body:  # a gateway that requires keys, asked without one
        return f"serving; Kafka {body.get('kafka')} (it shows the rest to API keys only)"
    calls = body.get("calls") or {}
    answered = ", ".join(f"{code}: {n}" for code, n in calls.items()) or "none yet"
    return (
        f"serving; Kafka {body.get('kafka')}, replies on {body.get('reply_topic')}, "
        f"{body.get('waiting', 0)} waiting, calls {answered}"
    )


def gateway(settings: Settings) -> ComponentStatus:
    """The HTTP gateway, if its ``/babelstream/gateway`` page answers."""
    g = settings.gateway
    url = f"http://{g.host}:{g.port}"
    return _served(
        "gateway", url, "/babelstream/gateway", settings.stack.probe_timeout_s, _gateway_line
    )


def components(settings: Settings, kafka_up: bool) -> list[ComponentStatus]:
    """Topics, workers, the SLA job, the dashboard and the gateway (the first three need
    Kafka)."""
    out = (
        [topics(settings), *workers(settings), sla_job(settings)]
        if kafka_up
        else [
            ComponentStatus("worker", "-", False, "unknown: Kafka is down"),
            ComponentStatus("sla", settings.sla.sink_topic, False, "unknown: Kafka is down"),
        ]
    )
    return [*out, dashboard(settings), gateway(settings)]
