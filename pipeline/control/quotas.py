"""Per-tenant quotas: characters per sliding window, counted in Redis for all workers.

Each tenant with a quota has one Redis hash: field = window step number
(``time // step``), value = characters admitted in that step, and a sorted
set of the request ids charged in the window. One Lua script
drops steps older than the window, sums the rest and admits each request
while the sum stays within the quota, all atomically on the Redis server and
with the server's clock, so every worker charges the same counter and no two
workers can both take the last characters. A rejected request learns when
enough older steps leave the window for it to fit (``retry_after_ms``); a
request larger than the whole quota can never fit and gets none.

Redis unavailable: requests are admitted (a Redis outage never stops
translation, as with the cache), logged once and counted in
``babelstream_quota_errors_total``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from pipeline.settings import RedisSettings, TenantSettings
from pipeline.storage.redis_client import redis_client

log = logging.getLogger(__name__)

# KEYS[1] = the tenant's step counters (hash), KEYS[2] = request ids charged in the window
# (sorted set, score = step); ARGV = window_ms, step_ms, quota, id1, cost1, id2, cost2, ...
# Returns one integer per request: -2 admitted (charged now or already charged: a retried
# batch or a redelivered request is not charged twice), -1 rejected for good
# (cost > quota), else rejected with that many milliseconds to wait.
_SCRIPT = """
local window = tonumber(ARGV[1])
local step = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = math.floor(now / step)
local steps = math.floor(window / step)
local oldest = current - steps + 1
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', oldest - 1)
local used = 0
local live = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local s = tonumber(fields[i])
  local n = tonumber(fields[i + 1])
  if s < oldest then
    redis.call('HDEL', KEYS[1], fields[i])
  else
    used = used + n
    live[#live + 1] = {s, n}
  end
end
table.sort(live, function(a, b) return a[1] < b[1] end)
local added = 0
local out = {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local cost = tonumber(ARGV[i + 1])
  if redis.call('ZSCORE', KEYS[2], id) then
    out[#out + 1] = -2
  elseif cost > quota then
    out[#out + 1] = -1
  elseif used + cost <= quota then
    used = used + cost
    added = added + cost
    redis.call('ZADD', KEYS[2], current, id)
    out[#out + 1] = -2
  else
    -- wait until the oldest steps have left the window and freed enough
    local need = used + cost - quota
    local freed = 0
    local wait = (current + steps) * step - now
    for _, entry in ipairs(live) do
      freed = freed + entry[2]
      if freed >= need then
        wait = (entry[1] + steps) * step - now
        break
      end
    end
    out[#out + 1] = math.max(1, wait)
  end
end
if added > 0 then
  redis.call('HINCRBY', KEYS[1], tostring(current), added)
end
redis.call('PEXPIRE', KEYS[1], window + step)
redis.call('PEXPIRE', KEYS[2], window + step)
return out
"""

_ADMITTED = -2
_NEVER = -1


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    """Whether one request may go on; when not, how long until it would fit (if ever)."""

    admitted: bool
    retry_after_ms: int | None = None
    quota: int | None = None

    def reason(self) -> str:
        """Why it was rejected, for the result's ``error``."""
        if self.retry_after_ms is None:
            return f"text is longer than the tenant's whole quota of {self.quota} characters"
        return (
            f"tenant quota of {self.quota} characters per window used up; "
            f"retry after {self.retry_after_ms} ms"
        )


ADMIT = QuotaDecision(True)


class QuotaLimiter:
    """Charges requests' characters to their tenants' quotas (``tenants.quota_chars``).

    Tenants without a quota are admitted without a Redis round trip.
    """

    def __init__(
        self,
        tenants: TenantSettings,
        redis_settings: RedisSettings,
        *,
        client: redis.Redis | None = None,
    ) -> None:
        self._tenants = tenants
        self._prefix = f"{redis_settings.key_prefix}:quota"
        self._client = client or redis_client(redis_settings)
        self._script: Callable[..., Any] = self._client.register_script(_SCRIPT)
        self._degraded = False
        self.errors = 0

    @property
    def enabled(self) -> bool:
        """Whether any tenant has a quota."""
        t = self._tenants
        return t.default_quota_chars is not None or bool(t.quota_chars)

    def key(self, tenant: str) -> str:
        """The tenant's counters (the braces keep both keys on one Redis Cluster slot)."""
        return f"{self._prefix}:{{{tenant}}}"

    def charge(
        self, costs: Mapping[str, Sequence[tuple[str, int]]]
    ) -> dict[str, list[QuotaDecision]]:
        """Per tenant, one decision per (request id, characters), in order.

        Admitted requests are charged once: a request id already charged in
        the window is admitted again without a second charge.
        """
        window_ms = round(self._tenants.quota_window_s * 1000)
        step_ms = max(1, round(self._tenants.quota_step_s * 1000))
        decisions: dict[str, list[QuotaDecision]] = {}
        limited = []
        for tenant, tenant_costs in costs.items():
            quota = self._tenants.quota(tenant)
            if quota is None or not tenant_costs:
                decisions[tenant] = [ADMIT] * len(tenant_costs)
            else:
                limited.append((tenant, quota, tenant_costs))
        if not limited:
            return decisions
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for tenant, quota, tenant_costs in limited:
                    args: list[str | int] = [window_ms, step_ms, quota]
                    for request_id, cost in tenant_costs:
                        args += [request_id, cost]
                    self._script(
                        keys=[self.key(tenant), f"{self.key(tenant)}:ids"], args=args, client=pipe
                    )
                replies = pipe.execute()
        except redis.RedisError as exc:
            self._failed(exc)
            for tenant, _, tenant_costs in limited:
                decisions[tenant] = [ADMIT] * len(tenant_costs)
            return decisions
        if self._degraded:
            log.warning("quota counters available again")
            self._degraded = False
        for (tenant, quota, _), reply in zip(limited, replies, strict=True):
            decisions[tenant] = [_decision(int(code), quota) for code in reply]
        return decisions

    async def charge_async(
        self, costs: Mapping[str, Sequence[tuple[str, int]]]
    ) -> dict[str, list[QuotaDecision]]:
        """:meth:`charge` in a thread, off the event loop."""
        return await asyncio.to_thread(self.charge, costs)

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        if not self._degraded:
            log.warning("quota counters unavailable (Redis); admitting requests: %s", exc)
            self._degraded = True

    def close(self) -> None:
        self._client.close()


def _decision(code: int, quota: int) -> QuotaDecision:
    if code == _ADMITTED:
        return ADMIT
    if code == _NEVER:
        return QuotaDecision(False, None, quota)
    return QuotaDecision(False, code, quota)
