"""``up`` / ``down`` / ``status`` for the local dev stack (CLI and test fixtures share these)."""

from __future__ import annotations

import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from pipeline.engine.registry import registry_models
from pipeline.errors import StackError, StackSettingsError
from pipeline.kafka.roles import ensure_roles, role_user
from pipeline.kafka.topics import ensure_topics, topic_specs
from pipeline.observability.progress import Reporter, quiet
from pipeline.settings import Settings
from pipeline.stack import layout
from pipeline.stack.kafka import KafkaService
from pipeline.stack.procs import (
    PidFile,
    ProcessRecord,
    is_alive,
    is_running,
    spawn,
    terminate,
    terminate_all,
)
from pipeline.stack.redis_server import RedisService
from pipeline.stack.secure import ensure_secure_material, load_secrets
from pipeline.stack.service import Probe, Service
from pipeline.stack.spark import spark_services

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
    """How clients reach the stack; ``settings`` are its client settings (security included)."""

    settings: Settings
    bootstrap_servers: str
    redis_url: str


def _layout(settings: Settings) -> Settings:
    """The running stack's layout when one is recorded, else what ``settings`` ask for."""
    return layout.recorded_layout(settings) or settings


def endpoints(settings: Settings) -> Endpoints:
    """Addresses and client settings of the stack ``settings`` describe (as recorded by ``up``)."""
    clients = layout.client_settings(_layout(settings))
    return Endpoints(clients, clients.kafka.bootstrap_servers, clients.redis.url)


def services(settings: Settings) -> list[Service]:
    """The services of the stack ``settings`` lay out, in start order: Kafka nodes, Redis."""
    clients = layout.client_settings(settings)
    nodes: list[Service] = [
        KafkaService(settings, node, clients.kafka) for node in layout.node_ports(settings.stack)
    ]
    return [*nodes, RedisService(settings, clients.redis)]


def optional_services(settings: Settings) -> list[Service]:
    """Services started on request (``babelstream spark up``); listed and stopped when running."""
    return spark_services(settings)


def _started_optional(settings: Settings) -> list[Service]:
    """The optional services that have a PID file (were started)."""
    return [s for s in optional_services(settings) if s.pidfile.read() is not None]


def _running(service: Service) -> ProcessRecord | None:
    record = service.pidfile.read()
    return record if record is not None and is_running(record) else None


def _log_tail(service: Service, lines: int = 20) -> str:
    try:
        return "\n".join(service.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_healthy(
    service: Service, record: ProcessRecord, deadline: float, report: Reporter
) -> Probe:
    started = time.monotonic()
    report(f"{service.name}: waiting for {service.address} ...")
    while True:
        if not is_alive(record):
            raise StackError(
                f"{service.name} exited during start-up; last lines of "
                f"{service.log_path}:\n{_log_tail(service)}"
            )
        probe = service.probe(record.pid)
        if probe.healthy:
            report(
                f"{service.name}: healthy (version {probe.version}, pid {record.pid}) "
                f"after {time.monotonic() - started:.1f}s"
            )
            return probe
        if time.monotonic() > deadline:
            raise StackError(
                f"{service.name} not healthy in time ({probe.detail}); see {service.log_path}"
            )
        time.sleep(_POLL_S)


def _launch(service: Service, report: Reporter) -> tuple[ProcessRecord, bool]:
    """Start ``service`` unless it runs; returns its process and whether we started it now."""
    record = _running(service)
    if record is not None:
        report(f"{service.name}: already running (pid {record.pid})")
        return record, False
    service.pidfile.remove()
    if service.port_in_use():
        raise StackSettingsError(
            f"{service.name}: port {service.address} is taken by a process "
            "`babelstream up` did not start; stop it or change the port "
            "(BABELSTREAM_STACK__*_PORT)"
        )
    service.prepare(report)
    report(f"{service.name}: starting (log: {service.log_path})")
    record = spawn(service.command(), service.log_path, service.workdir, service.marker)
    service.pidfile.write(record)
    return record, True


def _check_same_layout(settings: Settings) -> None:
    """A running stack of another layout must be stopped first (one-line StackError)."""
    running = layout.recorded_layout(settings)
    if running is None or layout.describe(running) == layout.describe(settings):
        return
    if any(_running(service) for service in services(running)):
        raise StackSettingsError(
            f"the stack under {settings.stack.home} runs with "
            f"{layout.describe(running)}; `babelstream down` before starting "
            f"it with {layout.describe(settings)}"
        )


def start_services(settings: Settings, report: Reporter = quiet) -> None:
    """Start whatever is not running and wait until healthy; create nothing in them.

    ``settings`` give the layout (``stack.brokers``, ``stack.secure``; the CLI
    applies its flags with :func:`pipeline.stack.layout.with_layout`). All
    Kafka nodes start before any is waited for: a KRaft quorum needs a
    majority of them up.
    """
    _check_same_layout(settings)
    if settings.stack.secure:
        ensure_secure_material(settings.stack.home)
    stack = services(settings)
    # prepared and spawned concurrently: formatting a node's storage is a JVM start too
    with ThreadPoolExecutor(max_workers=len(stack)) as pool:
        futures = [pool.submit(_launch, service, report) for service in stack]
    launched = [
        (service, future.result())
        for service, future in zip(stack, futures, strict=True)
        if future.exception() is None
    ]
    try:
        for future in futures:
            future.result()  # the first start-up failure, if any
        deadline = time.monotonic() + settings.stack.start_timeout_s
        for service, (record, started) in launched:
            _wait_healthy(service, record, deadline, report if started else quiet)
    except StackError:
        for service, (record, started) in launched:
            if started:
                terminate(record, grace_s=5)
                service.pidfile.remove()
        raise
    layout.record_layout(settings)


def start(settings: Settings, chosen: list[Service], report: Reporter = quiet) -> None:
    """Start each of ``chosen`` in order unless it runs, each healthy before the next."""
    for service in chosen:
        record, started = _launch(service, report)
        try:
            _wait_healthy(
                service,
                record,
                time.monotonic() + settings.stack.start_timeout_s,
                report if started else quiet,
            )
        except StackError:
            if started:
                terminate(record, grace_s=5)
                service.pidfile.remove()
            raise


def up(settings: Settings, report: Reporter = quiet) -> list[ServiceStatus]:
    """Start whatever is not running, wait until healthy, create topics (idempotent)."""
    start_services(settings, report)
    clients = layout.client_settings(settings)
    specs = topic_specs(clients, registry_models(clients.engine.registry))
    ensured = ensure_topics(clients.kafka, specs)
    report(
        f"topics: {len(ensured.created)} created, "
        f"{len(specs) - len(ensured.created)} already present "
        f"(replication {clients.kafka.replication_factor}, "
        f"min ISR {clients.kafka.min_insync_replicas})"
    )
    for name, (actual, wanted) in ensured.mismatched.items():
        report(f"topics: warning: {name} has {actual} partitions, configured {wanted}")
    if settings.stack.secure:
        passwords = load_secrets(settings.stack.home).role_passwords
        ensure_roles(clients.kafka, clients.replies.prefix, passwords)
        report(f"roles: {', '.join(role_user(r) for r in passwords)}, each with its ACLs")
    toml_path, env_path = layout.write_client_settings(settings)
    report(f"clients: `source {env_path}` (or BABELSTREAM_CONFIG={toml_path})")
    if settings.stack.secure:
        roles_folder = layout.role_settings_folder(settings.stack.home)
        report(f"clients by role: {roles_folder}/<role>.env (or .toml)")
    return status(settings)


def _stop(pidfiles: dict[str, PidFile], grace_s: float, report: Reporter) -> None:
    """Stop the recorded processes together; remove their PID files."""
    ours: dict[str, ProcessRecord] = {}
    for name, pidfile in pidfiles.items():
        record = pidfile.read()
        if record is None:
            report(f"{name}: not running")
        elif not is_running(record):
            report(f"{name}: not running (removed stale PID file)")
        else:
            report(f"{name}: stopping pid {record.pid} ...")
            ours[name] = record
    for name, graceful in zip(ours, terminate_all(list(ours.values()), grace_s), strict=True):
        report(f"{name}: stopped" + ("" if graceful else " (killed)"))
    for pidfile in pidfiles.values():
        pidfile.remove()


def down(
    settings: Settings, report: Reporter = quiet, names: Collection[str] | None = None
) -> None:
    """Stop the processes ``up`` started (PID file + command line checked).

    Redis first, then every Kafka node with a PID file, whatever layout is
    recorded, all nodes at once. ``names`` limits it to those services.
    """
    run_dir = settings.stack.home / "run"
    # names only: stopping needs neither the secure stack's secrets nor its certificates
    known = {
        name: PidFile(run_dir / f"{name}.pid")
        for name in layout.service_names(_layout(settings).stack)
    }
    for path in sorted(run_dir.glob("kafka*.pid")):
        known.setdefault(path.stem, PidFile(path))
    for service in _started_optional(settings):
        known.setdefault(service.name, service.pidfile)
    selected = {name: pidfile for name, pidfile in known.items() if names is None or name in names}
    grace_s = settings.stack.stop_timeout_s
    _stop({n: p for n, p in selected.items() if n == "redis"}, grace_s, report)
    _stop({n: p for n, p in selected.items() if n != "redis"}, grace_s, report)
    if not any(pidfile.path.exists() for pidfile in known.values()):
        layout.forget_layout(settings.stack.home)


def status(settings: Settings) -> list[ServiceStatus]:
    """Health, version and pid of each service (pid None: not started by us)."""
    result = []
    for service in [*services(_layout(settings)), *_started_optional(settings)]:
        record = _running(service)
        pid = record.pid if record else None
        probe = service.probe(pid)
        result.append(
            ServiceStatus(
                service.name, service.address, probe.version, pid, probe.healthy, probe.detail
            )
        )
    return result
