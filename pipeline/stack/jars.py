"""The local stack's JVM jars (the Kafka broker's), fetched by Maven into ``var/jars/``."""

from __future__ import annotations

from pathlib import Path

from pipeline.maven import POM_DIR, fetch
from pipeline.observability.progress import Reporter, quiet
from pipeline.settings import Settings


def jars_dir(settings: Settings) -> Path:
    """Where fetched jars live: ``stack.jars_dir``, by default ``<stack home>/jars``."""
    return settings.stack.jars_dir or settings.stack.home / "jars"


def kafka_jars(settings: Settings, report: Reporter = quiet) -> list[Path]:
    """The Kafka broker's classpath (``kafka_2.13`` and a logging backend)."""
    version = settings.stack.kafka_version
    return fetch(
        f"kafka-{version}",
        POM_DIR / "kafka" / "pom.xml",
        jars_dir(settings) / f"kafka-{version}",
        {"kafka.version": version},
        settings.stack.home / "log",
        report,
    )
