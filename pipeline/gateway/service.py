"""What one gateway process does for a call: tenant, detection, quota, Kafka, the answer.

A list ``q`` becomes one request per text, keyed ``<tenant>/<request id>:<n>``,
reassembled in order; texts with nothing to translate (empty, or already in
the target language) are answered at once. A tenant's quota is charged
before anything is produced, with the same request ids the worker charges
by, so nothing is charged twice. The call waits for its results until its
deadline; past it, the call answers 504 with its request id and the results
stay fetchable (``GET /translate/result/<id>``).
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
import socket
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis

from pipeline.contract.messages import (
    Headers,
    TranslationRequest,
    TranslationResult,
    now_ms,
    tenant_label,
)
from pipeline.contract.pairs import GATEWAY_GROUP_PREFIX
from pipeline.control.quotas import QuotaLimiter
from pipeline.detect import Detection, detector_for
from pipeline.engine.registry import Registry
from pipeline.gateway.call_store import PendingCall, ResultStore
from pipeline.gateway.calls import (
    AUTO,
    ApiError,
    TranslateCall,
    answer,
    as_answered,
    call_fingerprint,
    failure,
    over_limit,
)
from pipeline.gateway.keys import KeyInfo, KeyLookup
from pipeline.gateway.languages import Languages
from pipeline.gateway.link import KafkaLink, KafkaUnavailable, reply_topic_name
from pipeline.gateway.rate_limits import Caller, RequestLimits, Slowdown
from pipeline.observability import metrics
from pipeline.settings import GatewaySettings, Settings, TenantSettings
from pipeline.storage.redis_client import async_redis_client

log = logging.getLogger(__name__)
T = TypeVar("T")

# where a result of a call that outlived its deadline can be fetched
RESULT_PATH = "/translate/result/"
# trace context travels from the HTTP call into the requests' Kafka headers
TRACE_HEADERS = ("traceparent", "tracestate")


def default_instance(settings: Settings) -> str:
    """``<hostname>-<port>``, the default ``gateway.instance_id``."""
    host = "".join(c if c.isalnum() or c in "_-" else "-" for c in socket.gethostname())
    return f"{host[:48]}-{settings.gateway.port}"


_TAG = re.compile(r"<[^>]*>")


def detection_text(text: str, text_format: str) -> str:
    """What detection reads: markup's text content (tag names are no language)."""
    if text_format in ("html", "xml"):
        return html.unescape(_TAG.sub(" ", text))
    return text


def api_key_message(link: str | None) -> str:
    """LibreTranslate's answer to a call without a key where one is required."""
    if link:
        return f"Visit {link} to get an API key"
    return "Please contact the server operator to get an API key"


def anonymous_quota(settings: Settings) -> TenantSettings:
    """The tenants' settings with the anonymous tenant's quota (``gateway.anonymous_quota_chars``)
    added, unless ``tenants.quota_chars`` names that tenant."""
    tenants, gateway = settings.tenants, settings.gateway
    anonymous = tenant_label(gateway.anonymous_tenant)
    if gateway.anonymous_quota_chars is None or anonymous in tenants.quota_chars:
        return tenants
    quotas = {**tenants.quota_chars, anonymous: gateway.anonymous_quota_chars}
    return tenants.model_copy(update={"quota_chars": quotas})


@dataclass
class CallStats:
    """Calls this process answered, by HTTP status."""

    by_status: dict[int, int] = field(default_factory=dict)
    texts: int = 0

    def count(self, status: int) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1


class Gateway:
    """The state of one gateway process (its Kafka link, Redis, detector, languages)."""

    def __init__(self, settings: Settings, process: int = 0) -> None:
        self.settings = settings
        self.process = process
        self.languages = Languages.from_registry(Registry.load(settings.engine.registry))
        self.detector = detector_for(self.languages.tags, settings.detection)
        self.instance = settings.gateway.instance_id or default_instance(settings)
        self._redis = async_redis_client(settings.redis, timeout_s=settings.gateway.redis_timeout_s)
        prefix = settings.redis.key_prefix
        self.store = ResultStore(self._redis, prefix, settings.gateway.result_ttl_s)
        self.keys = KeyLookup(self._redis, prefix, settings.gateway.key_cache_s)
        self.link = KafkaLink(
            settings,
            reply_topic_name(settings, self.instance, process),
            group_id=f"{GATEWAY_GROUP_PREFIX}{self.instance}.{process}",
            store=self.store,
        )
        self.tenants = anonymous_quota(settings)
        self._quota = QuotaLimiter(self.tenants, settings.redis)
        self.call_limits = RequestLimits(settings)
        self.stats = CallStats()

    async def start(self) -> None:
        await self.link.start()
        # lingua loads a language's model on its first use: load them now, not in a call
        await asyncio.to_thread(self.detector.detect_each, ["warm up", "échauffement"])

    async def stop(self) -> None:
        await self.link.stop()
        await self._redis.aclose()
        self._quota.close()

    # -- tenants --------------------------------------------------------------------------

    async def key(self, api_key: str | None) -> KeyInfo | None:
        """What is stored about a call's key (tenant, limits); None for a call without one
        (the anonymous tenant's). 400 without a key where one is required, 403 for an
        unknown key, 503 when keys cannot be checked."""
        gateway = self.settings.gateway
        if not api_key:
            if gateway.require_api_key:
                raise ApiError(400, api_key_message(gateway.get_api_key_link))
            return None
        try:
            info = await self.keys.info(api_key)
        except (redis.RedisError, OSError) as exc:
            raise ApiError(
                503,
                f"API keys cannot be checked now (Redis: {exc})",
                headers={"Retry-After": str(gateway.retry_after_s)},
            ) from None
        if info is None:
            raise ApiError(403, "Invalid API key")
        return info

    async def tenant(self, api_key: str | None) -> str:
        """The tenant of a call's key (the anonymous tenant without one)."""
        info = await self.key(api_key)
        return info.tenant if info is not None else self.settings.gateway.anonymous_tenant

    async def admit(self, key: KeyInfo | None, address: str) -> None:
        """Count a call against its caller's request limits (its key's, else its client
        address's): 429 with Retry-After beyond."""
        caller = Caller(f"key:{key.id}", key.req_limit) if key else Caller(f"address:{address}")
        try:
            await self.call_limits.admit(caller)
        except Slowdown as exc:
            raise ApiError(429, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None

    def limits_for(self, key: KeyInfo | None) -> GatewaySettings:
        """The limits a call is parsed under: the gateway's, with its key's char_limit."""
        limits = self.settings.gateway
        if key is None or key.char_limit is None:
            return limits
        return limits.model_copy(update={"char_limit": key.char_limit})

    # -- detection ------------------------------------------------------------------------

    def detect(self, texts: Sequence[str], among: Sequence[str] | None = None) -> list[Detection]:
        """Each text on its own; an undetected one gets the default source, confidence 0.

        A text in a language no candidate is is refused as LibreTranslate refuses an
        unsupported source (400), naming the language and how sure the detector is.
        """
        candidates = list(among) if among is not None else list(self.languages.tags)
        fallback = self.settings.gateway.default_source
        if fallback not in candidates:
            fallback = candidates[0]
        found = self.detector.detect_each(texts, candidates)
        for number, d in enumerate(found, 1):
            if not d.supported:
                which = f" (text {number})" if len(texts) > 1 else ""
                raise ApiError(
                    400,
                    f"{d.language} is not supported: the text{which} is detected as "
                    f"{d.language} (confidence {d.confidence * 100:.1f}); no model here "
                    "translates it",
                )
        return [d if d.language is not None else Detection(fallback, 0.0) for d in found]

    def ranked(self, text: str) -> list[dict[str, Any]]:
        """``POST /detect`` for one text: candidates best first (LibreTranslate's shape),
        a language no model translates from included when the text is most likely in it."""
        found = self.detector.ranked(text)
        if not found:
            return [{"confidence": 0.0, "language": self.settings.gateway.default_source}]
        return [{"confidence": round(d.confidence * 100, 1), "language": d.language} for d in found]

    # -- translation ----------------------------------------------------------------------

    async def translate(self, call: TranslateCall, tenant: str, headers: Headers) -> dict[str, Any]:
        """The answer to a checked call, or :class:`ApiError`."""
        target = call.target
        detected: list[tuple[str, float]] | None = None
        if call.source == AUTO:
            texts = [detection_text(t, call.text_format) for t in call.texts]
            found = self.detect(texts, [*self.languages.sources_for(target), target])
            sources = [d.language or target for d in found]
            detected = [
                (lang, round(d.confidence * 100, 1)) for lang, d in zip(sources, found, strict=True)
            ]
        else:
            sources = [call.source] * len(call.texts)
        # nothing to translate: empty, or already in the target language
        known = [
            text if not text.strip() or source == target else None
            for text, source in zip(call.texts, sources, strict=True)
        ]
        self.stats.texts += len(call.texts)
        metrics.GATEWAY_TEXTS.labels("auto" if call.source == AUTO else "given").inc(
            len(call.texts)
        )
        metrics.GATEWAY_CHARACTERS.inc(sum(len(text) for text in call.texts))
        todo = [i for i, k in enumerate(known) if k is None]
        if not todo:
            return answer(call, [k or "" for k in known], detected)
        call_id = f"{tenant}/{call.request_id or uuid.uuid4().hex}"
        item_ids: list[str | None] = [
            f"{call_id}:{i}" if i in todo else None for i in range(len(known))
        ]
        requests = self._requests(call, tenant, sources, item_ids, call_id)
        self._check_deadline(call, requests)
        await self._charge(tenant, requests)
        pending = PendingCall(
            item_ids,
            known,
            call.as_list,
            detected,
            call.alternatives,
            call.text_format,
            call_fingerprint(call),
        )
        if call.request_id is not None:  # a retry after a crash finds it
            earlier = await self._redis_call(self.store.call(call_id))
            if earlier is not None and earlier.fingerprint not in ("", pending.fingerprint):
                # its item ids would answer with the earlier call's translations
                raise ApiError(
                    422,
                    f"request_id {call.request_id} was used for another call (other texts, "
                    "languages or options); a new call needs a request_id of its own",
                )
            await self._redis_call(self.store.keep_call(call_id, pending))
        results = await self._results(call, call_id, requests, headers, pending)
        problem = failure(results)
        if problem is not None:
            raise problem
        unescape = self.settings.gateway.unescape_entities
        by_id = {r.request_id: as_answered(r.translation or "", unescape) for r in results}
        translations = [
            k if k is not None else by_id[item_ids[i] or ""] for i, k in enumerate(known)
        ]
        return answer(call, translations, detected)

    def wait_ms(self, call: TranslateCall) -> int:
        """How long ``call`` waits for its translations: its ``deadline_ms``, else the default."""
        return call.deadline_ms or self.settings.gateway.wait_timeout_ms

    def _requests(
        self,
        call: TranslateCall,
        tenant: str,
        sources: Sequence[str],
        item_ids: Sequence[str | None],
        call_id: str,
    ) -> list[TranslationRequest]:
        gateway = self.settings.gateway
        wait_ms = self.wait_ms(call)
        submitted = now_ms()
        # bulk priority: the call is a job of its own, served after interactive work
        job_id = f"gw.{call_id}" if call.priority == "bulk" else None
        return [
            TranslationRequest(
                request_id=rid,
                source_lang=source,
                target_lang=call.target,
                text=text,
                submitted_at=submitted,
                timeout_ms=max(wait_ms, gateway.request_timeout_ms),
                tenant=tenant,
                reply_to=self.link.reply_topic,
                format=None if call.text_format == "text" else call.text_format,
                glossary=call.glossary,
                terms=list(call.terms) or None,
                job_id=job_id,
            )
            for rid, source, text in zip(item_ids, sources, call.texts, strict=True)
            if rid is not None
        ]

    def _check_deadline(self, call: TranslateCall, requests: Sequence[TranslationRequest]) -> None:
        """Refuse up front a call whose texts cannot be translated within its wait."""
        gateway = self.settings.gateway
        wait_ms = self.wait_ms(call)
        chars = sum(len(r.text) for r in requests)
        needed_ms = gateway.work_ms(chars)
        if needed_ms > wait_ms:
            raise ApiError(
                400,
                f"Invalid request: {chars} characters may take {needed_ms:.0f} ms to translate, "
                f"more than the call's deadline ({wait_ms} ms); send fewer characters or a "
                "longer deadline_ms",
            )

    async def _charge(self, tenant: str, requests: Sequence[TranslationRequest]) -> None:
        """The tenant's quota, before anything is produced (429 with Retry-After when used up)."""
        label = tenant_label(tenant)
        if self.tenants.quota(label) is None:
            return
        costs = {label: [(r.request_id, len(r.text)) for r in requests]}
        decisions = (await asyncio.to_thread(self._quota.charge, costs))[label]
        for request, decision in zip(requests, decisions, strict=True):
            if decision.admitted:
                continue
            if decision.retry_after_ms is None:
                raise over_limit(len(request.text), decision.quota or 0)
            seconds = max(1, -(-decision.retry_after_ms // 1000))
            raise ApiError(
                429,
                f"Slowdown: {decision.quota} characters per "
                f"{self.tenants.quota_window_s:g} seconds",
                headers={"Retry-After": str(seconds)},
            )

    async def _results(
        self,
        call: TranslateCall,
        call_id: str,
        requests: Sequence[TranslationRequest],
        headers: Headers,
        pending: PendingCall,
    ) -> list[TranslationResult]:
        ids = [r.request_id for r in requests]
        waiters = self.link.waiters
        futures, new = waiters.expect(ids, durable=call.request_id is not None)
        try:
            stored = (
                await self._redis_call(self.store.results(ids))
                if call.request_id is not None
                else {}
            )
            for future, rid in zip(futures, ids, strict=True):
                if rid in stored and not future.done():
                    future.set_result(stored[rid])
            to_send = [
                r
                for r, fresh, f in zip(requests, new, futures, strict=True)
                if fresh and not f.done()
            ]
            if to_send:
                try:
                    await self.link.submit(to_send, headers)
                except KafkaUnavailable as exc:
                    raise ApiError(
                        503, str(exc), headers={"Retry-After": str(exc.retry_after_s)}
                    ) from None
            wait_s = self.wait_ms(call) / 1000
            _, late = await asyncio.wait(futures, timeout=wait_s)
        finally:
            waiters.release(ids)
        if late:
            # results that came between the timeout and the release have no waiter left
            await self._redis_call(
                self.store.keep_results([f.result() for f in futures if f.done()])
            )
            await self._redis_call(self.store.keep_call(call_id, pending))
            rid = call_id.split("/", 1)[1]
            raise ApiError(
                504,
                f"Translation not ready within {wait_s * 1000:.0f} ms; fetch it later "
                f"from {RESULT_PATH}{rid}",
                extra={"requestId": rid, "resultUrl": f"{RESULT_PATH}{rid}"},
            )
        return [f.result() for f in futures]

    async def _redis_call(self, operation: Awaitable[T]) -> T:
        """A store operation; Redis failing answers 503 with Retry-After."""
        try:
            return await operation
        except (redis.RedisError, OSError) as exc:
            raise ApiError(
                503,
                f"results cannot be kept now (Redis: {exc})",
                headers={"Retry-After": str(self.settings.gateway.retry_after_s)},
            ) from None

    async def fetch(self, tenant: str, request_id: str) -> tuple[int, dict[str, Any]]:
        """``GET /translate/result/<id>``: 200 with the answer, 202 while pending, or ApiError."""
        call_id = f"{tenant}/{request_id}"
        pending = await self._redis_call(self.store.call(call_id))
        if pending is None:
            raise ApiError(404, f"No call with request id {request_id} (or it expired)")
        ids = [rid for rid in pending.item_ids if rid is not None]
        found = await self._redis_call(self.store.results(ids))
        missing = [rid for rid in ids if rid not in found]
        # what is translated so far, so a timed-out call's finished texts are not lost
        done = [
            known
            if rid is None
            else _translation(found.get(rid), self.settings.gateway.unescape_entities)
            for known, rid in zip(pending.known, pending.item_ids, strict=True)
        ]
        partial = done if pending.as_list else done[0]
        if missing:
            return 202, {
                "requestId": request_id,
                "status": "pending",
                "pending": len(missing),
                "translatedText": partial,
            }
        problem = failure(list(found.values()))
        if problem is not None:
            problem.extra["translatedText"] = partial
            raise problem
        call = TranslateCall(
            texts=[""] * len(pending.item_ids),
            as_list=pending.as_list,
            source=AUTO if pending.detected else "",
            target="",
            text_format=pending.text_format,  # type: ignore[arg-type]
            alternatives=pending.alternatives,
        )
        # every result is here and ok: no None is left
        return 200, answer(call, [text or "" for text in done], pending.detected)

    def status(self) -> Mapping[str, Any]:
        """``GET /babelstream/gateway``: this process, its link and its counters."""
        link = self.link
        return {
            "instance": self.instance,
            "process": self.process,
            "reply_topic": link.reply_topic,
            "kafka": "available" if link.available else (link.problem or "unavailable"),
            "waiting": len(link.waiters),
            "calls": {str(k): v for k, v in sorted(self.stats.by_status.items())},
            "texts": self.stats.texts,
            "produced": link.stats.produced,
            "results": link.stats.results,
            "stored_results": link.stats.stored_results,
            "dropped_results": link.stats.dropped_results,
            "unavailable": link.stats.unavailable,
            "languages": list(self.languages.tags),
        }


def _translation(result: TranslationResult | None, unescape_entities: bool) -> str | None:
    """A result's translation as answered; None while it has none or when it failed."""
    if result is None or result.status != "ok":
        return None
    return as_answered(result.translation or "", unescape_entities)
