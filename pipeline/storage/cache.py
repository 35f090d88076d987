"""Two-level translation cache: in-process LRU (L1) and Redis (L2).

Keys are content digests (:func:`pipeline.contract.digest.request_digest`), which
already cover model, pair, tenant, domain and the full text. A failing Redis
never fails a request: the cache degrades to L1 only, logs once, counts the
failure and retries Redis after a back-off.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import redis
from cachetools import LRUCache
from pydantic import ConfigDict, TypeAdapter, ValidationError

from pipeline.settings import RedisSettings
from pipeline.storage.redis_client import redis_client

log = logging.getLogger(__name__)

Level = Literal["l1", "l2"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CachedTranslation:
    """What a cache (or the dedup window) remembers for one digest."""

    # validated strictly when read back from Redis (pydantic reads this on dataclasses)
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(strict=True)

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    # further TranslationResult fields a hit repeats (fidelity, glossary_hits, glossary_version)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, data: str | bytes) -> CachedTranslation:
        """Parse and validate a stored entry (pydantic.ValidationError when it is not one)."""
        return _ENTRY.validate_json(data)


_ENTRY = TypeAdapter(CachedTranslation)


class LruCache:
    """L1: bounded in-process LRU (cachetools)."""

    def __init__(self, max_entries: int) -> None:
        self._entries: LRUCache[str, CachedTranslation] | None = (
            LRUCache(maxsize=max_entries) if max_entries > 0 else None
        )

    def get_many(self, digests: Iterable[str]) -> dict[str, CachedTranslation]:
        if self._entries is None:
            return {}
        found = {}
        for digest in digests:
            hit = self._entries.get(digest)
            if hit is not None:
                found[digest] = hit
        return found

    def put_many(self, entries: Mapping[str, CachedTranslation]) -> None:
        if self._entries is not None:
            self._entries.update(entries)

    def __len__(self) -> int:
        return 0 if self._entries is None else len(self._entries)


class RedisCache:
    """L2: Redis with pipelined MGET / SET EX, a key prefix and a cache version.

    Errors are swallowed after counting them: the caller sees misses.
    """

    def __init__(
        self,
        settings: RedisSettings,
        *,
        client: redis.Redis | None = None,
        retry_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._client = client or redis_client(settings)
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._down_until = 0.0
        self._degraded_logged = False
        self.errors = 0
        self.corrupt = 0

    def key(self, digest: str) -> str:
        """The Redis key of a digest (prefix, cache version, digest)."""
        s = self._settings
        return f"{s.key_prefix}:v{s.cache_version}:{digest}"

    @property
    def available(self) -> bool:
        return self._clock() >= self._down_until

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        self._down_until = self._clock() + self._retry_after_s
        if not self._degraded_logged:
            log.warning("Redis cache unavailable, continuing with L1 only: %s", exc)
            self._degraded_logged = True

    def _recovered(self) -> None:
        if self._degraded_logged:
            log.warning("Redis cache available again")
            self._degraded_logged = False

    def get_many(self, digests: list[str]) -> dict[str, CachedTranslation]:
        if not digests or not self.available:
            return {}
        try:
            values = self._client.mget([self.key(d) for d in digests])
        except redis.RedisError as exc:
            self._failed(exc)
            return {}
        self._recovered()
        found: dict[str, CachedTranslation] = {}
        for digest, value in zip(digests, values, strict=True):
            if value is None:
                continue
            try:
                found[digest] = CachedTranslation.from_json(value)
            except ValidationError as exc:
                # Written by another version or damaged: a miss, never a failed request.
                self.corrupt += 1
                log.warning(
                    "ignoring an unreadable L2 cache entry %s (%d problems)",
                    self.key(digest),
                    exc.error_count(),
                )
        return found

    def put_many(self, entries: Mapping[str, CachedTranslation]) -> None:
        if not entries or not self.available:
            return
        try:
            with self._client.pipeline(transaction=False) as pipe:
                for digest, entry in entries.items():
                    pipe.set(self.key(digest), entry.to_json(), ex=self._settings.ttl_s)
                pipe.execute()
        except redis.RedisError as exc:
            self._failed(exc)
            return
        self._recovered()

    def close(self) -> None:
        self._client.close()


class TwoLevelCache:
    """Looks up L1 then L2 (promoting L2 hits into L1); stores into both.

    Async because L2 round trips run in a thread of their own, off the event
    loop and out of the engine's executors (a slow Redis never delays a model
    call, nor the reverse); L1 is only touched on the loop, so it needs no lock.
    """

    def __init__(self, l1: LruCache, l2: RedisCache | None) -> None:
        self.l1 = l1
        self.l2 = l2
        self._redis = ThreadPoolExecutor(1, thread_name_prefix="redis")

    async def _l2(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._redis, call)

    async def get_many(self, digests: list[str]) -> dict[str, tuple[CachedTranslation, Level]]:
        found: dict[str, tuple[CachedTranslation, Level]] = {
            d: (hit, "l1") for d, hit in self.l1.get_many(digests).items()
        }
        rest = [d for d in digests if d not in found]
        if rest and self.l2 is not None:
            l2 = self.l2
            l2_hits = await self._l2(lambda: l2.get_many(rest))
            self.l1.put_many(l2_hits)
            found.update({d: (hit, "l2") for d, hit in l2_hits.items()})
        return found

    async def put_many(self, entries: Mapping[str, CachedTranslation]) -> None:
        self.l1.put_many(entries)
        if self.l2 is not None:
            l2 = self.l2
            await self._l2(lambda: l2.put_many(entries))
