"""Results nobody waits for any more, and the shape of the calls they belong to (Redis).

A call that outlives its deadline answers 504 with its request id; the
reply consumer then finds no waiter for its results and keeps them here,
as it does for results that arrive while no gateway process waits (a
restart), so ``GET /translate/result/<id>`` can answer later. Keys
(``<prefix>`` is ``BABELSTREAM_REDIS__KEY_PREFIX``), each living
``gateway.result_ttl_s``:

* ``<prefix>:gateway:result:<item request id>`` — the result's JSON (the first one wins);
* ``<prefix>:gateway:call:<tenant>/<request id>`` — a :class:`PendingCall`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import redis.asyncio
from pydantic import ValidationError

from pipeline.contract.messages import TranslationResult


@dataclass(frozen=True, slots=True)
class PendingCall:
    """What is needed to answer a call later: its item ids, and the answers it already had."""

    item_ids: list[str | None]
    # translations known at once (texts with nothing to translate), by position
    known: list[str | None]
    as_list: bool
    # [language, confidence 0-100] per item when the source was auto
    detected: list[tuple[str, float]] | None
    alternatives: int
    text_format: str
    # what the call asked for (calls.call_fingerprint): a request id re-sent with other texts
    # or options is another call; "" in calls kept by earlier releases
    fingerprint: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> PendingCall:
        data = json.loads(raw)
        detected = data.pop("detected")
        return cls(**data, detected=[(lang, conf) for lang, conf in detected] if detected else None)


class ResultStore:
    """Late results and pending calls in Redis."""

    def __init__(self, client: redis.asyncio.Redis, key_prefix: str, ttl_s: int) -> None:
        self._client = client
        self._prefix = f"{key_prefix}:gateway"
        self._ttl_s = ttl_s

    def _result_key(self, request_id: str) -> str:
        return f"{self._prefix}:result:{request_id}"

    def _call_key(self, call_id: str) -> str:
        return f"{self._prefix}:call:{call_id}"

    async def keep_results(self, results: Sequence[TranslationResult]) -> None:
        """Store results (a result already stored for an id is kept: the first one wins)."""
        if not results:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for result in results:
                pipe.set(
                    self._result_key(result.request_id), result.to_json(), ex=self._ttl_s, nx=True
                )
            await pipe.execute()

    async def results(self, request_ids: Sequence[str]) -> dict[str, TranslationResult]:
        """The stored results of those ids that have one."""
        if not request_ids:
            return {}
        raw = await self._client.mget([self._result_key(rid) for rid in request_ids])
        found: dict[str, TranslationResult] = {}
        for rid, value in zip(request_ids, raw, strict=True):
            if value is not None:
                try:
                    found[rid] = TranslationResult.from_json(value)
                except ValidationError:
                    continue
        return found

    async def keep_call(self, call_id: str, call: PendingCall) -> None:
        await self._client.set(self._call_key(call_id), call.to_json(), ex=self._ttl_s)

    async def call(self, call_id: str) -> PendingCall | None:
        raw = await self._client.get(self._call_key(call_id))
        return PendingCall.from_json(raw) if raw is not None else None

    async def keep_suggestion(self, suggestion: dict[str, str]) -> None:
        """``POST /suggest``: appended to ``<prefix>:gateway:suggestions`` (a list)."""
        await self._client.rpush(f"{self._prefix}:suggestions", json.dumps(suggestion))
