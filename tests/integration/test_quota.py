"""Tenant quotas on the real Redis: sliding window, shared by every worker, retry hints."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from pipeline.control.quotas import QuotaLimiter
from pipeline.settings import RedisSettings, Settings, TenantSettings, load_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


def ids(costs: list[int]) -> list[tuple[str, int]]:
    """Each cost as a request of its own (fresh ids)."""
    return [(uuid.uuid4().hex, cost) for cost in costs]


def limiter(settings: Settings, **tenants: object) -> QuotaLimiter:
    return QuotaLimiter(TenantSettings(**tenants), settings.redis)  # type: ignore[arg-type]


def test_over_quota_is_rejected_with_when_to_retry(settings: Settings) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    quotas = limiter(settings, quota_chars={tenant: 100}, quota_window_s=3, quota_step_s=0.5)
    first = quotas.charge({tenant: ids([40, 40, 40, 10, 500])})[tenant]
    assert [d.admitted for d in first] == [True, True, False, True, False]
    assert first[2].retry_after_ms is not None and 0 < first[2].retry_after_ms <= 3000
    assert first[4].retry_after_ms is None, "larger than the whole quota: retrying never helps"
    assert "whole quota" in first[4].reason()
    assert "retry after" in first[2].reason()

    time.sleep(first[2].retry_after_ms / 1000 + 0.05)
    (later,) = quotas.charge({tenant: ids([40])})[tenant]
    assert later.admitted, "the hinted wait was enough: the old characters left the window"


def test_tenants_without_a_quota_never_touch_redis(settings: Settings) -> None:
    broken = RedisSettings(url="redis://127.0.0.1:1/0", socket_timeout_s=0.2)
    quotas = QuotaLimiter(TenantSettings(quota_chars={"limited": 5}), broken)
    assert [d.admitted for d in quotas.charge({"free": ids([10**6])})["free"]] == [True]
    assert quotas.errors == 0
    # and a Redis outage admits (counted), it does not stop translation
    assert quotas.charge({"limited": ids([100])})["limited"][0].admitted
    assert quotas.errors == 1


def test_a_request_is_charged_once_however_often_it_is_checked(settings: Settings) -> None:
    """A batch retried after a fault, or redelivered after a crash, is not charged again."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    quotas = limiter(settings, quota_chars={tenant: 100})
    batch = [("r-1", 60), ("r-2", 30)]
    for _ in range(3):
        assert all(d.admitted for d in quotas.charge({tenant: batch})[tenant])
    (third,) = quotas.charge({tenant: [("r-3", 20)]})[tenant]
    assert not third.admitted, "90 of 100 used once, not three times"
    (fourth,) = quotas.charge({tenant: [("r-4", 10)]})[tenant]
    assert fourth.admitted


def test_workers_share_one_counter_and_never_overspend(settings: Settings) -> None:
    """Four 'workers' charge the same tenant at once: admitted characters never exceed it."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    quota = 1000
    workers = [limiter(settings, quota_chars={tenant: quota}) for _ in range(4)]
    admitted: list[int] = []
    lock = threading.Lock()

    def charge(quotas: QuotaLimiter) -> None:
        for _ in range(25):
            decisions = quotas.charge({tenant: ids([7, 11, 13])})[tenant]
            with lock:
                admitted.extend(
                    c for c, d in zip([7, 11, 13], decisions, strict=True) if d.admitted
                )

    threads = [threading.Thread(target=charge, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert quota - 13 < sum(admitted) <= quota
    client = redis.Redis.from_url(settings.redis.url)
    stored = sum(int(v) for v in client.hgetall(workers[0].key(tenant)).values())
    assert stored == sum(admitted)
    assert 0 < client.pttl(workers[0].key(tenant)) <= 61_000, "counters expire with the window"
