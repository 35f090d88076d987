"""Tenants on Kafka: a request's tenant is the ingress topic it was written to.

A Kafka record does not say who produced it, so the tenant a request
declares proves nothing. With ``tenants.identity_from_topic`` each tenant
writes to its own ingress, ``translate.ingress.<tenant>``, which on a secure
stack only that tenant's principal may write to (``babelstream tenants add``
grants it). :class:`TenantAdmission` stamps every request read there with the
topic's tenant and a reply topic of the tenant's own, and refuses one that
names another tenant or another's reply topic. A cancel written there
(a ``CancelRequest``: ``cancelled_at`` and no ``text``) goes to
``translate.cancel`` as that tenant's, covering its own requests only. Pure logic: the worker's
ingress gate (``workers/tenant_ingress.py``) only moves bytes.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from pipeline.contract.codec import RecordRef, dead_letter
from pipeline.contract.messages import CancelRequest, DeadLetter, DeadLetterReason, Headers
from pipeline.contract.pairs import (
    CANCEL_TOPIC,
    DLQ_TOPIC,
    REQUESTS_TOPIC,
    default_reply_topic,
    ingress_tenant,
    tenant_reply_prefix,
)
from pipeline.kafka.records import Outgoing
from pipeline.routing import rejection_result


class TenantAdmission:
    """Decides what one record of a tenant's own ingress becomes.

    Returns the records to produce, in order: the request with ``tenant`` set to
    the topic's tenant and ``reply_to`` one of the tenant's reply topics (its
    default one when it names none), for the shared ingress; or a dead letter
    (``tenant_mismatch``, ``reply_topic_not_owned``) followed by an ``error``
    result for the tenant, copied to its default reply topic, never to the
    reply topic the record names. Bytes that are not a JSON object go on as
    they are: the router dead-letters them with its own reason, and they name
    no tenant. Raises: ValueError for a topic that is not a tenant's ingress.
    """

    def __init__(self, replies_prefix: str, worker: str) -> None:
        self._replies_prefix = replies_prefix
        self._worker = worker

    def admit(
        self, key: bytes | None, value: bytes | None, ref: RecordRef, headers: Headers
    ) -> list[Outgoing]:
        tenant = ingress_tenant(ref.topic)
        if tenant is None:
            raise ValueError(f"{ref.topic} is not a tenant's ingress topic")
        try:
            document = json.loads(value or b"")
        except ValueError:
            document = None
        if not isinstance(document, dict):
            return [Outgoing(REQUESTS_TOPIC, key, value, headers, "forwarded")]
        if "cancelled_at" in document and "text" not in document:
            return self._cancel(key, value, ref, headers, tenant, document)
        declared, reply_to = document.get("tenant"), document.get("reply_to")
        own = tenant_reply_prefix(self._replies_prefix, tenant)
        if declared is not None and declared != tenant:
            error = (
                f"the request names tenant {declared!r}, but was written to {ref.topic}, "
                f"which is tenant {tenant!r}'s"
            )
            return self._refused(key, value, ref, headers, tenant, "tenant_mismatch", error)
        if reply_to is not None and not (isinstance(reply_to, str) and reply_to.startswith(own)):
            error = (
                f"reply_to {reply_to!r} is not one of tenant {tenant!r}'s reply topics "
                f"(their names start with {own!r})"
            )
            return self._refused(key, value, ref, headers, tenant, "reply_topic_not_owned", error)
        stamped: dict[str, Any] = {
            **document,
            "tenant": tenant,
            "reply_to": reply_to or default_reply_topic(self._replies_prefix, tenant),
        }
        body = json.dumps(stamped, ensure_ascii=False, separators=(",", ":")).encode()
        return [Outgoing(REQUESTS_TOPIC, key, body, headers, "forwarded")]

    def _cancel(
        self,
        key: bytes | None,
        value: bytes | None,
        ref: RecordRef,
        headers: Headers,
        tenant: str,
        document: dict[str, Any],
    ) -> list[Outgoing]:
        """A tenant's cancel: to ``translate.cancel``, covering that tenant's requests only
        (keyed under the tenant, so it never replaces another's cancel); one naming
        another tenant, or not a cancel, is a dead letter."""
        declared = document.get("tenant")
        if declared is not None and declared != tenant:
            error = (
                f"the cancel names tenant {declared!r}, but was written to {ref.topic}, "
                f"which is tenant {tenant!r}'s"
            )
            return [_dead_lettered(key, value, ref, headers, "tenant_mismatch", error)[1]]
        try:
            cancel = CancelRequest.model_validate({**document, "tenant": tenant})
        except ValidationError as exc:
            error = f"not a valid cancel: {exc}"
            return [_dead_lettered(key, value, ref, headers, "invalid", error)[1]]
        return [Outgoing(CANCEL_TOPIC, cancel.key.encode(), cancel.to_json(), headers, "cancel")]

    def _refused(
        self,
        key: bytes | None,
        value: bytes | None,
        ref: RecordRef,
        headers: Headers,
        tenant: str,
        reason: DeadLetterReason,
        error: str,
    ) -> list[Outgoing]:
        letter, record = _dead_lettered(key, value, ref, headers, reason, error)
        out = [record]
        reply = rejection_result(value, letter, self._worker)
        if reply is not None:
            # the result counts for the tenant that sent it, whatever tenant it named
            result = reply[1].model_copy(update={"tenant": tenant})
            out.append(
                Outgoing.for_result(
                    result, headers, reason, default_reply_topic(self._replies_prefix, tenant)
                )
            )
        return out


def _dead_lettered(
    key: bytes | None,
    value: bytes | None,
    ref: RecordRef,
    headers: Headers,
    reason: DeadLetterReason,
    error: str,
) -> tuple[DeadLetter, Outgoing]:
    """The dead letter of a record of a tenant's ingress, and its record for the DLQ."""
    letter = dead_letter(ref, key, value, reason, error)
    return letter, Outgoing(DLQ_TOPIC, key, letter.to_json(), headers, reason)
