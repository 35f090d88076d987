"""Replication against what the cluster offers: refused below the brokers' defaults, warned
below the cluster's size; under-replicated project topics found for `status`."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pipeline.errors import ConfigError
from pipeline.kafka.topics import ClusterReplication, check_replication, under_replicated
from pipeline.settings import KafkaSettings

CLUSTER = ClusterReplication(brokers=3, default_replication_factor=3, min_insync_replicas=2)


def _kafka(replication: int, min_isr: int) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers="k1:9092", replication_factor=replication, min_insync_replicas=min_isr
    )


@pytest.mark.parametrize(("replication", "min_isr"), [(1, 1), (2, 1), (3, 1)])
def test_less_than_the_brokers_defaults_is_refused(replication: int, min_isr: int) -> None:
    with pytest.raises(ConfigError) as caught:
        check_replication(_kafka(replication, min_isr), CLUSTER)
    message = str(caught.value)
    assert "3 brokers with default.replication.factor 3 and min.insync.replicas 2" in message
    assert f"kafka.replication_factor is {replication}" in message
    assert "BABELSTREAM_KAFKA__REPLICATION_FACTOR=3" in message
    assert "BABELSTREAM_KAFKA__MIN_INSYNC_REPLICAS=2" in message
    assert "\n" not in message


def test_what_the_cluster_offers_passes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_replication(_kafka(3, 2), CLUSTER)
        check_replication(_kafka(1, 1), ClusterReplication(1, 1, 1))  # a single broker
    assert caplog.records == []


def test_below_the_cluster_size_but_at_its_default_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator's default (1 here, Kafka's own) is honoured, loudly."""
    with caplog.at_level(logging.WARNING):
        check_replication(_kafka(1, 1), ClusterReplication(3, 1, 1))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "1 replica on a 3-broker cluster" in record.getMessage()


def _topic(name: str, replicas: list[list[int]], isr: list[list[int]]) -> dict[str, Any]:
    return {
        "name": name,
        "error_code": 0,
        "partitions": [
            {"partition_index": i, "replica_nodes": r, "isr_nodes": s}
            for i, (r, s) in enumerate(zip(replicas, isr, strict=True))
        ],
    }


def test_under_replicated_project_topics() -> None:
    full = [[1, 2, 3], [2, 3, 1]]
    described = [
        _topic("translate.results", full, full),
        _topic("babelstream-dedup-changelog", [[1], [2]], [[1], [2]]),
        _topic("translate.requests", full, [[1, 2, 3], [2, 3]]),
        _topic("someone.elses", [[1]], [[1]]),  # not a project topic
        _topic("__consumer_offsets", [[1]], [[1]]),
    ]
    assert under_replicated(described, CLUSTER) == {
        "babelstream-dedup-changelog": "1 replica of 3",
        "translate.requests": "partition 1 in sync on 2 of 3 replicas",
    }
    assert under_replicated(described[:1], CLUSTER) == {}
