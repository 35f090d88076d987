"""API keys of the gateway: each key belongs to a tenant, stored in Redis.

A key is shown once, when it is made (``babelstream keys add --tenant T``);
Redis keeps only its SHA-256 digest, in one hash
(``<prefix>:gateway:keys``: digest -> JSON ``{id, tenant, label,
created_at, req_limit, char_limit}``; the limits are LibreTranslate's per-key
ones, None for the gateway's defaults). The ``id`` (the digest's first 12 hex digits) names a key
in listings and to ``keys revoke`` without revealing it. A call's quota
and fair-share weight are its tenant's (``tenants.*`` settings).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import time
from dataclasses import asdict, dataclass

import redis
import redis.asyncio
from cachetools import TTLCache

from pipeline.contract.messages import now_ms
from pipeline.errors import EXIT_USAGE, BabelStreamError

KEY_PREFIX = "bs_"
ID_LENGTH = 12
TENANT_MAX = 64
# tenants name quota counters, glossaries and request ids (<tenant>/<id>:<n>)
TENANT = re.compile(rf"[A-Za-z0-9._-]{{1,{TENANT_MAX}}}")


class ApiKeyError(BabelStreamError):
    """A key command that cannot be done (unknown key id, bad tenant name)."""

    exit_code = EXIT_USAGE


def digest(api_key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def hash_name(key_prefix: str) -> str:
    return f"{key_prefix}:gateway:keys"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What is stored about one key (never the key itself)."""

    id: str
    tenant: str
    label: str | None
    created_at: int
    # the key's calls per minute and characters per call (None: the gateway's)
    req_limit: int | None = None
    char_limit: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _info(raw: bytes | str) -> KeyInfo:
    return KeyInfo(**json.loads(raw))


class KeyStore:
    """Adds, lists and revokes keys (the ``babelstream keys`` commands; synchronous)."""

    def __init__(self, client: redis.Redis, key_prefix: str) -> None:
        self._client = client
        self._hash = hash_name(key_prefix)

    def add(
        self,
        tenant: str,
        label: str | None = None,
        req_limit: int | None = None,
        char_limit: int | None = None,
    ) -> tuple[str, KeyInfo]:
        """A new key for ``tenant``: (the key, shown only now, and what is stored)."""
        if not TENANT.fullmatch(tenant):
            raise ApiKeyError(f"tenant must be 1-{TENANT_MAX} of A-Z a-z 0-9 . _ -, got {tenant!r}")
        api_key = KEY_PREFIX + secrets.token_urlsafe(24)
        hashed = digest(api_key)
        info = KeyInfo(hashed[:ID_LENGTH], tenant, label, now_ms(), req_limit, char_limit)
        self._client.hset(self._hash, hashed, json.dumps(info.to_dict()))
        return api_key, info

    def list(self) -> list[KeyInfo]:
        """Every key, by tenant then creation time."""
        raw: dict[bytes, bytes] = self._client.hgetall(self._hash)  # type: ignore[assignment]
        return sorted(map(_info, raw.values()), key=lambda k: (k.tenant, k.created_at))

    def revoke(self, key_or_id: str) -> KeyInfo:
        """Remove a key, named by itself or by its id; ApiKeyError when none matches."""
        raw: dict[bytes, bytes] = self._client.hgetall(self._hash)  # type: ignore[assignment]
        wanted = digest(key_or_id)
        for hashed, value in raw.items():
            info = _info(value)
            if hashed.decode() == wanted or info.id == key_or_id:
                self._client.hdel(self._hash, hashed)
                return info
        raise ApiKeyError(
            f"no API key with id or value {key_or_id!r} (see `babelstream keys list`)"
        )


class KeyLookup:
    """Key -> what is stored about it, for the gateway (asyncio), with hits and misses
    cached ``cache_s``."""

    def __init__(self, client: redis.asyncio.Redis, key_prefix: str, cache_s: float) -> None:
        self._client = client
        self._hash = hash_name(key_prefix)
        self._cache: TTLCache[str, KeyInfo | None] | None = (
            TTLCache(maxsize=10_000, ttl=cache_s, timer=time.monotonic) if cache_s > 0 else None
        )
        self._lookups: dict[str, asyncio.Future[KeyInfo | None]] = {}

    async def info(self, api_key: str) -> KeyInfo | None:
        """The key's tenant and limits, or None for an unknown (or revoked) key.

        Concurrent calls with one key share one lookup.
        """
        if self._cache is not None and api_key in self._cache:
            return self._cache[api_key]
        running = self._lookups.get(api_key)
        if running is None:
            running = self._lookups[api_key] = asyncio.ensure_future(self._lookup(api_key))
            running.add_done_callback(lambda _: self._lookups.pop(api_key, None))
        return await asyncio.shield(running)

    async def _lookup(self, api_key: str) -> KeyInfo | None:
        raw = await self._client.hget(self._hash, digest(api_key))
        info = _info(raw) if raw is not None else None
        if self._cache is not None:
            self._cache[api_key] = info
        return info
