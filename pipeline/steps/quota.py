"""quota: a tenant over its characters-per-window quota gets ``rejected``, with when to retry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Protocol

from pipeline.contract.messages import tenant_label
from pipeline.control.quotas import QuotaDecision
from pipeline.observability import metrics
from pipeline.steps.base import Batch, Fields, Item


class Quotas(Protocol):
    """Per-tenant quota counters (:class:`pipeline.control.quotas.QuotaLimiter`)."""

    @property
    def enabled(self) -> bool: ...

    async def charge_async(
        self, costs: Mapping[str, Sequence[tuple[str, int]]]
    ) -> dict[str, list[QuotaDecision]]: ...


class QuotaCheck:
    """Charges each pending request's characters to its tenant; rejects what is over quota.

    Reads: ``request`` (tenant, text, id). Resolves: ``rejected`` results, reason
    ``quota_exceeded``, with ``retry_after_ms`` when waiting helps. A request is
    charged once however often it is checked (a retried batch, a redelivery).
    Raises: nothing (the counters' Redis down: requests are admitted, counted).
    """

    reads: ClassVar[Fields] = frozenset({"request"})
    sets: ClassVar[Fields] = frozenset({"result"})

    in_canary: ClassVar[bool] = False  # a canary charges no tenant

    def __init__(self, quotas: Quotas) -> None:
        self._quotas = quotas

    async def __call__(self, batch: Batch) -> None:
        if not self._quotas.enabled:
            return
        by_tenant: dict[str, list[Item]] = {}
        for item in batch.pending():
            if item.request is not None:
                by_tenant.setdefault(tenant_label(item.request.tenant), []).append(item)
        if not by_tenant:
            return
        decisions = await self._quotas.charge_async(
            {
                tenant: [(i.request.request_id, len(i.request.text)) for i in items if i.request]
                for tenant, items in by_tenant.items()
            }
        )
        for tenant, items in by_tenant.items():
            rejected = 0
            for item, decision in zip(items, decisions[tenant], strict=True):
                if not decision.admitted:
                    rejected += 1
                    batch.resolve(
                        item,
                        "rejected",
                        reason="quota_exceeded",
                        retry_after_ms=decision.retry_after_ms,
                        error=decision.reason(),
                    )
            metrics.record_quota(tenant, admitted=len(items) - rejected, rejected=rejected)
