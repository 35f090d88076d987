"""L2 (Redis) calls run in the cache's own thread: never on the loop, never in the engine's."""

from __future__ import annotations

import asyncio
import threading

from pipeline.storage.cache import CachedTranslation, LruCache, TwoLevelCache

VALUE = CachedTranslation("x", "m", 1, 1)


class RecordingL2:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def get_many(self, digests: list[str]) -> dict[str, CachedTranslation]:
        self.threads.append(threading.current_thread().name)
        return {d: VALUE for d in digests if d == "hit"}

    def put_many(self, entries: dict[str, CachedTranslation]) -> None:
        self.threads.append(threading.current_thread().name)


def test_l2_calls_run_in_the_redis_thread():
    l2 = RecordingL2()
    cache = TwoLevelCache(LruCache(10), l2)  # type: ignore[arg-type]

    async def go() -> dict[str, tuple[CachedTranslation, str]]:
        found = await cache.get_many(["hit", "miss"])
        await cache.put_many({"new": VALUE})
        return found

    found = asyncio.run(go())
    assert found == {"hit": (VALUE, "l2")}
    assert len(l2.threads) == 2
    assert all(name.startswith("redis") for name in l2.threads)
