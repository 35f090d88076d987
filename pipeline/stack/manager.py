"""``up`` / ``down`` / ``status`` for the local dev stack (CLI and test fixtures share these)."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import asdict, dataclass

from pipeline.errors import StackError
from pipeline.settings import Settings
from pipeline.stack.kafka import KafkaService
from pipeline.stack.procs import ProcessRecord, is_alive, is_running, spawn, terminate
from pipeline.stack.redis import RedisService
from pipeline.stack.service import Probe, Reporter, Service, quiet
from pipeline.stack.spark import spark_services
from pipeline.stack.topics import ensure_topics, topic_specs

_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One line of ``babelstream status``."""

    name: str
    address: str
    version: str | None
    pid: int | None
    healthy: bool
    detail: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """How clients reach the stack."""

    settings: Settings
    bootstrap_servers: str
    redis_url: str


def endpoints(settings: Settings) -> Endpoints:
    """Addresses of the stack ``settings`` describes."""
    return Endpoints(settings, KafkaService(settings).address, RedisService(settings).url)


def services(settings: Settings) -> list[Service]:
    """The stack's services, in start order."""
    return [KafkaService(settings), RedisService(settings)]


def optional_services(settings: Settings) -> list[Service]:
    """Services started on request (``babelstream spark up``); listed and stopped when running."""
    return spark_services(settings)


def _started(settings: Settings) -> list[Service]:
    """The stack's services, and the optional ones that have a PID file (were started)."""
    return services(settings) + [s for s in optional_services(settings)
                                 if s.pidfile.read() is not None]


def _running(service: Service) -> ProcessRecord | None:
    record = service.pidfile.read()
    return record if record is not None and is_running(record) else None


def _log_tail(service: Service, lines: int = 20) -> str:
    try:
        return "\n".join(service.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_healthy(service: Service, record: ProcessRecord, timeout_s: float,
                  report: Reporter) -> Probe:
    started = time.monotonic()
    deadline = started + timeout_s
    report(f"{service.name}: waiting for {service.address} ...")
    while True:
        if not is_alive(record):
            raise StackError(f"{service.name} exited during start-up; last lines of "
                             f"{service.log_path}:\n{_log_tail(service)}")
        probe = service.probe(record.pid)
        if probe.healthy:
            report(f"{service.name}: healthy (version {probe.version}, pid {record.pid}) "
                   f"after {time.monotonic() - started:.1f}s")
            return probe
        if time.monotonic() > deadline:
            raise StackError(f"{service.name} not healthy after {timeout_s:.0f}s "
                             f"({probe.detail}); see {service.log_path}")
        time.sleep(_POLL_S)


def _start(service: Service, timeout_s: float, report: Reporter) -> None:
    record = _running(service)
    if record is not None:
        report(f"{service.name}: already running (pid {record.pid})")
        _wait_healthy(service, record, timeout_s, quiet)
        return
    service.pidfile.remove()
    if service.port_in_use():
        raise StackError(f"{service.name}: port {service.address} is taken by a process "
                         "`babelstream up` did not start; stop it or change the port "
                         "(BABELSTREAM_STACK__*_PORT)")
    service.prepare(report)
    report(f"{service.name}: starting (log: {service.log_path})")
    record = spawn(service.command(), service.log_path, service.workdir, service.marker)
    service.pidfile.write(record)
    try:
        _wait_healthy(service, record, timeout_s, report)
    except StackError:
        terminate(record, grace_s=5)
        service.pidfile.remove()
        raise


def start(settings: Settings, chosen: list[Service], report: Reporter = quiet) -> None:
    """Start each of ``chosen`` that is not running and wait until it is healthy."""
    for service in chosen:
        _start(service, settings.stack.start_timeout_s, report)


def up(settings: Settings, report: Reporter = quiet) -> list[ServiceStatus]:
    """Start whatever is not running, wait until healthy, create topics (idempotent)."""
    start(settings, services(settings), report)
    specs = topic_specs(settings)
    ensured = ensure_topics(settings.kafka, specs)
    report(f"topics: {len(ensured.created)} created, "
           f"{len(specs) - len(ensured.created)} already present")
    for name, (actual, wanted) in ensured.mismatched.items():
        report(f"topics: warning: {name} has {actual} partitions, configured {wanted}")
    return status(settings)


def down(settings: Settings, report: Reporter = quiet,
         names: Collection[str] | None = None) -> None:
    """Stop the processes ``up`` started (PID file + command line checked), in reverse order.

    ``names`` limits it to those services (default: all).
    """
    for service in reversed(_started(settings)):
        if names is not None and service.name not in names:
            continue
        record = service.pidfile.read()
        if record is None:
            report(f"{service.name}: not running")
        elif not is_running(record):
            report(f"{service.name}: not running (removed stale PID file)")
        else:
            report(f"{service.name}: stopping pid {record.pid} ...")
            graceful = terminate(record, settings.stack.stop_timeout_s)
            report(f"{service.name}: stopped" + ("" if graceful else " (killed)"))
        service.pidfile.remove()


def status(settings: Settings) -> list[ServiceStatus]:
    """Health, version and pid of each service (pid None: not started by us)."""
    result = []
    for service in _started(settings):
        record = _running(service)
        pid = record.pid if record else None
        probe = service.probe(pid)
        result.append(ServiceStatus(service.name, service.address, probe.version, pid,
                                    probe.healthy, probe.detail))
    return result
