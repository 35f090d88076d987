"""Language pair ids and topic names.

A pair id is ``<src>_<tgt>`` (``en_de``, ``en_en-XA``). BCP-47 tags never
contain ``_``, so the id splits unambiguously, and ``_``/``-``/letters are
legal in Kafka topic names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import ContractError

REQUESTS_TOPIC = "translate.requests"
RESULTS_TOPIC = "translate.results"
DLQ_TOPIC = "translate.dlq"
SLA_TOPIC = "translate.sla"
# compacted, keyed by request id (``job:<job id>`` for a whole bulk job)
CANCEL_TOPIC = "translate.cancel"
# compacted, keyed by <topic>:<partition>:<offset>: consumed records no worker may run again
QUARANTINE_TOPIC = "translate.quarantine"
# compacted, keyed by dead-letter id: which dead letters were replayed
DLQ_REPLAYED_TOPIC = "translate.dlq.replayed"
SLA_LATE_TOPIC = "translate.sla.late"
TICKS_TOPIC = "translate.ticks"
# the work topics of one model (every pair it serves), interactive and bulk
WORK_PREFIX = "translate.work."
BULK_WORK_PREFIX = "translate.work-bulk."
# releases before 0.2 had work topics per pair; `babelstream topics migrate` empties them
LEGACY_PAIR_PREFIX = "translate.requests."
LEGACY_BULK_PREFIX = "translate.bulk."
# a model id names topics: Kafka's topic characters, and room for the prefixes
_MODEL_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
# a tenant's own ingress (tenants.identity_from_topic): translate.ingress.<tenant>, which
# only its principal may write to on a secure stack; its requests are stamped its tenant
TENANT_INGRESS_PREFIX = "translate.ingress."
# the reply topic of a tenant's requests that name none: the shared results topic is not
# readable by tenants, so without one a tenant could read none of its results
DEFAULT_REPLY_NAME = "results"
# The names the services' own topics, groups and transactions take, which the roles'
# ACLs grant by prefix (pipeline/kafka/roles.py): a change here changes both sides.
# Reply topics <replies.prefix>gateway.<instance>.<process> and <replies.prefix>bulk.<job>.*
GATEWAY_REPLY_LABEL = "gateway"
BULK_REPLY_LABEL = "bulk"
# a gateway process's group, <prefix><instance>.<process>
GATEWAY_GROUP_PREFIX = "babelstream-gateway."
# the SLA job's Kafka sinks, one transactional id per checkpoint: <prefix><digest>
SLA_TRANSACTION_PREFIX = "babelstream-sla-"
# dlq replay's one transactional id: <kafka.client_id><suffix>
REPLAY_TRANSACTION_SUFFIX = "-dlq-replay"
# a tenant with topics of its own: no dot, so no tenant's topic prefix (its reply topics
# are <replies.prefix><tenant>.*) is the start of another tenant's
TOPIC_TENANT_PATTERN = r"[A-Za-z0-9_-]{1,64}"
_TOPIC_TENANT = re.compile(TOPIC_TENANT_PATTERN)


@dataclass(frozen=True, slots=True)
class Pair:
    """An ordered language pair."""

    source: str
    target: str

    @property
    def id(self) -> str:
        return f"{self.source}_{self.target}"

    @classmethod
    def parse(cls, pair_id: str) -> Pair:
        src, sep, tgt = pair_id.partition("_")
        if not sep or not src or not tgt or "_" in tgt:
            raise ContractError(
                f"invalid pair id {pair_id!r}: expected '<src>_<tgt>', e.g. 'en_de'"
            )
        return cls(src, tgt)

    def __str__(self) -> str:
        return self.id


def check_model_id(model_id: str) -> str:
    """``model_id`` if it can name topics, else ContractError."""
    if not _MODEL_ID.fullmatch(model_id):
        raise ContractError(
            f"invalid model id {model_id!r}: 1 to 200 of the characters A-Z a-z 0-9 . _ - "
            "(it names the model's work topics)"
        )
    return model_id


def work_topic(model_id: str) -> str:
    """A model's interactive work topic: requests of every pair it serves."""
    return WORK_PREFIX + model_id


def bulk_work_topic(model_id: str) -> str:
    """A model's bulk work topic (served after interactive work)."""
    return BULK_WORK_PREFIX + model_id


def legacy_pair_topics(pair: Pair | str) -> tuple[str, str]:
    """The interactive and bulk work topics of one pair in releases before 0.2."""
    return LEGACY_PAIR_PREFIX + str(pair), LEGACY_BULK_PREFIX + str(pair)


def check_topic_tenant(tenant: str) -> str:
    """``tenant`` if it can name a tenant's own topics, else ContractError."""
    if not _TOPIC_TENANT.fullmatch(tenant):
        raise ContractError(
            f"invalid tenant {tenant!r}: 1 to 64 of the characters A-Z a-z 0-9 _ - "
            "(it names the tenant's topics and its Kafka user)"
        )
    return tenant


def tenant_ingress_topic(tenant: str) -> str:
    """The topic only ``tenant`` writes its requests to."""
    return TENANT_INGRESS_PREFIX + check_topic_tenant(tenant)


def ingress_tenant(topic: str) -> str | None:
    """The tenant whose own ingress ``topic`` is, or None for any other topic."""
    if not topic.startswith(TENANT_INGRESS_PREFIX):
        return None
    tenant = topic[len(TENANT_INGRESS_PREFIX) :]
    return tenant if _TOPIC_TENANT.fullmatch(tenant) else None


def tenant_reply_prefix(replies_prefix: str, tenant: str) -> str:
    """The names of ``tenant``'s reply topics start with this (its ACLs are on this prefix)."""
    return f"{replies_prefix}{check_topic_tenant(tenant)}."


def default_reply_topic(replies_prefix: str, tenant: str) -> str:
    """The reply topic of ``tenant``'s requests that name none (``tenants add`` creates it)."""
    return tenant_reply_prefix(replies_prefix, tenant) + DEFAULT_REPLY_NAME
