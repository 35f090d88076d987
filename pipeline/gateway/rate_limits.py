"""Calls per minute and per day of one caller, for every process of the gateway (Redis).

LibreTranslate's ``--req-limit`` and ``--daily-req-limit``, and a key's own
``req_limit``: a call with an API key counts for that key, one without for
its client's address (``gateway.forwarded_allow_ips`` says whose
``X-Forwarded-For`` to believe). The counters are the ``limits`` library's
sliding windows in Redis, so every gateway process counts the same calls.

Redis unavailable: calls are admitted (a Redis outage never stops
translation, as with the quotas), logged once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis
from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.errors import StorageError

from pipeline.settings import Settings
from pipeline.storage.redis_client import redis_options

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a call, as the limits count it: a key's id, or a client's address."""

    identity: str
    # the key's own calls per minute (None: the gateway's req_limit)
    req_limit: int | None = None


class Slowdown(Exception):
    """A caller over one of its limits; ``retry_after_s`` until a call would fit."""

    def __init__(self, limit: RateLimitItem, retry_after_s: int) -> None:
        super().__init__(f"Slowdown: {limit.amount} per 1 {limit.GRANULARITY.name}")
        self.retry_after_s = retry_after_s


class RequestLimits:
    """Counts each caller's calls against ``gateway.req_limit`` (or its key's) and
    ``gateway.daily_req_limit``; :meth:`admit` raises :class:`Slowdown` beyond."""

    def __init__(self, settings: Settings) -> None:
        g = settings.gateway
        self._per_minute = g.req_limit
        self._per_day = RateLimitItemPerDay(g.daily_req_limit) if g.daily_req_limit else None
        options = {k: v for k, v in redis_options(settings.redis).items() if v is not None}
        storage = RedisStorage(
            settings.redis.url,
            implementation="redispy",
            key_prefix=f"{settings.redis.key_prefix}:gateway:calls",
            **options,
        )
        self._limiter = SlidingWindowCounterRateLimiter(storage)
        self._degraded = False

    def _limits(self, caller: Caller) -> list[RateLimitItem]:
        per_minute = caller.req_limit or self._per_minute
        items: list[RateLimitItem] = [RateLimitItemPerMinute(per_minute)] if per_minute else []
        return [*items, *([self._per_day] if self._per_day else [])]

    async def admit(self, caller: Caller) -> None:
        """Count one call of ``caller``; :class:`Slowdown` when over a limit."""
        items = self._limits(caller)
        if not items:
            return
        try:
            for item in items:
                # one atomic count per limit: a refused call is not counted by the limit
                # that refused it (a shorter one before it counted it)
                if not await self._limiter.hit(item, caller.identity):
                    stats = await self._limiter.get_window_stats(item, caller.identity)
                    raise Slowdown(item, max(1, round(stats.reset_time - time.time())))
        except (redis.RedisError, OSError, StorageError) as exc:
            if not self._degraded:
                log.warning("call limits unavailable (Redis); admitting calls: %s", exc)
                self._degraded = True
            return
        if self._degraded:
            log.warning("call limits available again")
            self._degraded = False
