"""Integration fixtures: one real local stack (Kafka KRaft + Redis) per test session.

The ``stack`` fixture calls the same API as ``babelstream up``, so it is a
no-op when the stack already runs (``make test`` / CI start it first); at the
end of the session it stops only the services it started itself.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from pipeline.kafka.check import admin_client
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import load_settings
from pipeline.stack import layout, manager
from pipeline.stack.manager import Endpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _report(line: str) -> None:
    print(f"[stack] {line}", file=sys.stderr)


@pytest.fixture(scope="session")
def stack() -> Iterator[Endpoints]:
    """The running local stack, started if needed (shared by the whole session)."""
    settings = layout.with_layout(load_settings())
    ours_before = {s.name for s in manager.status(settings) if s.pid is not None}
    manager.up(settings, _report)
    yield manager.endpoints(settings)
    started_here = {s.name for s in manager.services(settings)} - ours_before
    if started_here:
        manager.down(settings, _report, names=started_here)


@pytest.fixture
def new_topic(stack: Endpoints, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Factory for a fresh, uniquely named topic (deleted after the test).

    Created like every project topic: replication and min ISR from settings.
    """
    kafka = stack.settings.kafka
    admin = admin_client(kafka, "tests")
    created: list[str] = []

    def make(partitions: int = 3) -> str:
        name = re.sub(
            r"[^A-Za-z0-9._-]", "-", f"test.{request.node.name[:60]}.{uuid.uuid4().hex[:8]}"
        )
        ensure_topics(kafka, {name: TopicSpec(partitions)})
        created.append(name)
        return name

    yield make
    if created:
        admin.delete_topics(created)
    admin.close()


@pytest.fixture(scope="session")
def spark(stack: Endpoints) -> Iterator[SparkSession]:
    """A small local Spark session with the jobs' Kafka connector jars."""
    from pyspark.sql import SparkSession

    from pipeline.spark_connector import connector_jars

    jars = connector_jars(stack.settings.kafka, _report)
    session = (
        SparkSession.builder.master("local[1]")
        .appName("babelstream-tests")
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        # drop idle cached Kafka producers soon: a test stack they wrote to may be gone
        .config("spark.kafka.producer.cache.timeout", "20s")
        .config("spark.kafka.producer.cache.evictorThreadRunInterval", "5s")
        .getOrCreate()
    )
    yield session
    session.stop()
