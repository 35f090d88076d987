"""A ``redis-server`` of our own (not Debian's system service), configured from ``var/``."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pipeline.errors import StackError
from pipeline.observability.progress import Reporter
from pipeline.settings import RedisSettings, Settings
from pipeline.stack.secure import ServiceSecrets, service_secrets
from pipeline.stack.service import Probe, Service
from pipeline.storage.redis_client import redis_options

HOST = "127.0.0.1"
INSTALL_HINT = "install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu)"


def render_redis_conf(
    port: int, data_dir: Path, config_path: Path, secure: ServiceSecrets | None = None
) -> str:
    """Config for a foreground, loopback-only, non-persistent dev Redis.

    Secure: TLS only (no plaintext port), the default user switched off and
    one ACL user whose password is stored as its SHA-256 (never in clear).
    """
    lines = [
        f"port {port}" if secure is None else "port 0",
        f"bind {HOST}",
        "protected-mode yes",
        "daemonize no",
        "supervised no",
        'logfile ""',
        f"dir {data_dir}",
        'save ""',
        "appendonly no",
        "maxmemory 256mb",
        "maxmemory-policy allkeys-lru",
        # put our config path into the process title, so `down` can recognise it
        f'proc-title-template "{{title}} {{listen-addr}} {config_path}"',
    ]
    if secure is not None:
        digest = hashlib.sha256(secure.password.get_secret_value().encode()).hexdigest()
        lines += [
            f"tls-port {port}",
            f"tls-cert-file {secure.tls.server_cert}",
            f"tls-key-file {secure.tls.server_key}",
            f"tls-ca-cert-file {secure.tls.ca}",
            # clients authenticate with the ACL password; a certificate is optional
            "tls-auth-clients optional",
            "user default off",
            # every command the pipeline runs, none that could wipe, scan or reconfigure
            # the store (FLUSHALL, KEYS, CONFIG, DEBUG, ... are @dangerous); INFO is
            # the health check's
            f"user {secure.username} on #{digest} ~* &* +@all -@dangerous +info",
        ]
    return "\n".join(lines) + "\n"


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, check=False)


def ensure_redis_server(report: Reporter) -> str:
    """Path of ``redis-server``; installs Debian's package when missing and we are root."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise StackError(f"redis-server is not installed; {INSTALL_HINT}")
    report("redis: redis-server missing, installing Debian's package ...")
    cached = (
        subprocess.run(
            ["apt-cache", "show", "redis-server"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not cached:
        _apt("update")
    done = _apt("install", "-y", "--no-install-recommends", "redis-server")
    found = shutil.which("redis-server")
    if done.returncode != 0 or not found:
        raise StackError(
            f"apt-get install redis-server failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return found


class RedisService(Service):
    """``redis-server var/redis/redis.conf`` in the foreground, tracked by PID file."""

    name = "redis"

    def __init__(self, settings: Settings, clients: RedisSettings) -> None:
        super().__init__(settings)
        # how a client reaches it (probe): URL, ACL user, TLS
        self._clients = clients

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self.settings.stack.redis_port

    @property
    def config_path(self) -> Path:
        return self.workdir / "redis.conf"

    @property
    def marker(self) -> str:
        return str(self.config_path)

    @property
    def url(self) -> str:
        return self._clients.url

    def _secure(self) -> ServiceSecrets | None:
        return service_secrets(self.home, "redis") if self.settings.stack.secure else None

    def prepare(self, report: Reporter) -> None:
        ensure_redis_server(report)
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_redis_conf(self.port, data, self.config_path, self._secure())
        )

    def command(self) -> list[str]:
        return [shutil.which("redis-server") or "redis-server", str(self.config_path)]

    def probe(self, pid: int | None) -> Probe:
        import redis

        options = {**redis_options(self._clients), "socket_timeout": 2, "socket_connect_timeout": 2}
        client = redis.Redis.from_url(self.url, **options)
        try:
            client.ping()
            version = str(client.info("server")["redis_version"])
        except redis.RedisError as exc:
            return Probe(False, detail=f"PING {self.address} failed: {exc}")
        finally:
            client.close()
        return Probe(True, version, "PONG" + (" (TLS, ACL user)" if self._clients.uses_tls else ""))
