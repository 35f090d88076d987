"""docker-compose.yml parses, and its services use the CLI's own environment variables."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from pipeline.settings import PROJECT_ROOT, ObservabilitySettings, Settings
from tests.unit.settings_keys import PREFIX, assert_setting_key

COMPOSE = PROJECT_ROOT / "docker-compose.yml"


def compose_config_command() -> list[str] | None:
    """A Docker client that can check a compose file without an engine."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"]
    if shutil.which("docker-compose"):
        return ["docker-compose", "-f", str(COMPOSE), "config", "--quiet"]
    return None


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def babelstream_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: s for name, s in compose["services"].items() if s.get("image") == "babelstream:local"
    }


def test_docker_compose_accepts_the_file() -> None:
    command = compose_config_command()
    if command is None:
        pytest.skip(
            "neither `docker compose` nor Debian's docker-compose is installed "
            "(`make install` installs docker-compose)"
        )
    done = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, check=False)
    assert done.returncode == 0, done.stderr


def test_topology(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in (
        "kafka",
        "redis",
        "router",
        "worker",
        "sla",
        "dashboard",
        "gateway",
        "otel-collector",
        "jaeger",
        "prometheus",
        "grafana",
    ):
        assert name in services, name
    assert services["kafka"]["image"] == "apache/kafka:3.9.1"
    assert "KAFKA_PROCESS_ROLES" in environment(services["kafka"])  # KRaft, no ZooKeeper
    assert "ports" not in services["worker"]  # scalable: no fixed host ports
    for path in (
        "deploy/otel-collector.yaml",
        "deploy/prometheus/prometheus.yml",
        "deploy/grafana/dashboards/babelstream.json",
        "Dockerfile",
    ):
        assert (PROJECT_ROOT / path).is_file(), path


def test_services_use_the_cli_settings_variables(compose: dict[str, Any]) -> None:
    services = babelstream_services(compose)
    assert {"router", "worker", "sla", "dashboard", "gateway", "init-topics"} <= set(services)
    for name, service in services.items():
        env = environment(service)
        assert env.get("BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS") == "kafka:19092", name
        for key in env:
            if key.startswith(PREFIX) and key != "BABELSTREAM_CONFIG":
                assert_setting_key(key, name)


def test_service_environments_load_as_settings(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each service's values parse with the CLI's own settings loader."""

    for name, service in babelstream_services(compose).items():
        with monkeypatch.context() as patch:
            for key in list(os.environ):
                if key.startswith(PREFIX):
                    patch.delenv(key)
            for key, value in environment(service).items():
                patch.setenv(key, value)
            settings = Settings()
        assert settings.kafka.bootstrap_servers == "kafka:19092", name
        assert settings.observability.metrics_host == "0.0.0.0", name


def test_prometheus_scrapes_the_metrics_port(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((PROJECT_ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    assert sd["port"] == ObservabilitySettings().metrics_port == 9464
    assert set(sd["names"]) == {"router", "worker"}
