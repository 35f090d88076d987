"""Who consumes the project's topics: consumer groups, their members and lag (admin client).

``babelstream status`` lists the groups; ``translate`` uses them to say
whether anything serves a pair after a timeout. Faust workers put their
web URL in their group metadata, so each member's readiness page can be
found from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import NoError

from pipeline.contract.pairs import BULK_WORK_PREFIX, WORK_PREFIX
from pipeline.errors import ServiceUnavailable
from pipeline.kafka.check import admin_client
from pipeline.settings import KafkaSettings

# Faust's member metadata ends with a JSON document that holds the worker's web URL.
_FAUST_METADATA = re.compile(r'\{"assignment".*\}', re.S)
_PROJECT_TOPICS = "translate."


@dataclass(frozen=True, slots=True)
class Member:
    """One consumer of a group, with the project topics' partitions it holds."""

    client_id: str
    host: str
    assigned: dict[str, list[int]]
    url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "host": self.host,
            "assigned": self.assigned,
            "url": self.url,
        }


@dataclass(frozen=True, slots=True)
class Group:
    """A consumer group reading ``translate.*`` topics."""

    group_id: str
    state: str
    members: list[Member]
    # topic -> messages not yet committed by the group (end offset - committed offset)
    lag: dict[str, int] = field(default_factory=dict)

    @property
    def topics(self) -> set[str]:
        return {topic for m in self.members for topic in m.assigned}

    @property
    def models(self) -> list[str]:
        """Model ids whose interactive or bulk work topic a member holds."""
        return sorted(
            {
                topic.removeprefix(prefix)
                for topic in self.topics
                for prefix in (WORK_PREFIX, BULK_WORK_PREFIX)
                if topic.startswith(prefix)
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.state,
            "models": self.models,
            "members": [m.to_dict() for m in self.members],
            "lag": self.lag,
        }


def consumer_groups(kafka: KafkaSettings, with_lag: bool = True) -> list[Group]:
    """Every consumer group with a member on a ``translate.*`` topic, by group id."""
    admin = admin_client(kafka, "status")
    try:
        listed = [
            g["group_id"] for g in admin.list_groups() if g.get("protocol_type") == "consumer"
        ]
        described = admin.describe_groups(listed) if listed else {}
        groups = [
            Group(group_id, info["group_state"], members)
            for group_id, info in sorted(described.items())
            if (members := [m for m in map(_member, info["members"]) if m.assigned])
        ]
        return [_with_lag(admin, g) for g in groups] if with_lag else groups
    finally:
        admin.close()


class AssignmentCheck:
    """Which partitions of some topics no member of one consumer group holds.

    Keeps one admin client (a worker asks every few seconds); a failed call
    drops it, and the next call connects again. Blocking: call it in a thread.
    """

    def __init__(self, kafka: KafkaSettings, group_id: str) -> None:
        self._kafka = kafka
        self._group_id = group_id
        self._admin: Any = None

    def unassigned(self, topics: Iterable[str]) -> dict[str, int]:
        """Per topic of ``topics``, how many of its partitions no member holds (only
        topics with some; a topic that does not exist yet counts none)."""
        if self._admin is None:
            self._admin = admin_client(self._kafka, "assignment")
        try:
            described = self._admin.describe_groups([self._group_id]).get(self._group_id, {})
            wanted = set(topics)
            # every topic, then filtered: naming a missing one could have it auto-created
            counts = {
                t["name"]: len(t["partitions"])
                for t in self._admin.describe_topics()
                if t["name"] in wanted and not t.get("error_code")
            }
        except Exception:
            self.close()
            raise
        held: dict[str, set[int]] = {}
        for member in map(_member, described.get("members", [])):
            for topic, partitions in member.assigned.items():
                held.setdefault(topic, set()).update(partitions)
        missing = {
            topic: count - len(held.get(topic, set()) & set(range(count)))
            for topic, count in counts.items()
        }
        return {topic: n for topic, n in missing.items() if n}

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()


def serving(groups: Iterable[Group], topic: str) -> list[Group]:
    """The groups with a member assigned a partition of ``topic``."""
    return [g for g in groups if topic in g.topics]


def _member(raw: dict[str, Any]) -> Member:
    assignment = raw.get("member_assignment") or {}
    assigned = {
        part["topic"]: sorted(part["partitions"])
        for part in assignment.get("assigned_partitions", [])
        if part["topic"].startswith(_PROJECT_TOPICS)
    }
    return Member(
        raw["client_id"],
        raw["client_host"].lstrip("/"),
        dict(sorted(assigned.items())),
        _faust_url(raw.get("member_metadata")),
    )


def _faust_url(metadata: str | bytes | dict[str, Any] | None) -> str | None:
    if isinstance(metadata, dict):
        # kafka-python decoded it: a plain consumer's subscription, no Faust URL
        return None
    if not metadata:
        return None
    text = metadata.decode("latin-1") if isinstance(metadata, bytes) else metadata
    match = _FAUST_METADATA.search(text)
    if match is None:
        return None
    try:
        url = json.loads(match.group(0)).get("url")
    except ValueError:
        return None
    return url if isinstance(url, str) else None


def _with_lag(admin: Any, group: Group) -> Group:
    partitions = [
        TopicPartition(topic, p)
        for m in group.members
        for topic, ps in m.assigned.items()
        for p in ps
    ]
    committed = admin.list_group_offsets({group.group_id: partitions}).get(group.group_id, {})
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    starts = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in partitions})
    lag: dict[str, int] = {}
    for tp in partitions:
        done = committed.get(tp)
        # no commit yet: the group starts from the earliest offset (auto_offset_reset)
        position = done.offset if done is not None and done.offset >= 0 else starts[tp].offset
        lag[tp.topic] = lag.get(tp.topic, 0) + max(0, ends[tp].offset - position)
    return Group(group.group_id, group.state, group.members, dict(sorted(lag.items())))


def start_group_at_end(kafka: KafkaSettings, group_id: str, topic: str) -> None:
    """Commit ``group_id``'s offsets at the end of every partition of ``topic``: a group
    without members then reads only what is written after this (not the topic's past)."""
    admin = admin_client(kafka, "groups")
    try:
        (described,) = admin.describe_topics([topic])
        ends = {
            TopicPartition(topic, p["partition_index"]): OffsetSpec.LATEST
            for p in described["partitions"]
        }
        failed = {
            tp.partition: outcome["error"].__name__
            for tp, outcome in admin.reset_group_offsets(group_id, ends).items()
            if outcome["error"] is not NoError
        }
    finally:
        admin.close()
    if failed:
        raise ServiceUnavailable(
            f"could not start group {group_id} at the end of {topic}: {failed}"
        )


def delete_group(kafka: KafkaSettings, group_id: str) -> None:
    """Delete a consumer group without members (its committed offsets go with it)."""
    admin = admin_client(kafka, "groups")
    try:
        admin.delete_groups([group_id])
    finally:
        admin.close()
