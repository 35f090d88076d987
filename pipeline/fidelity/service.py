"""What a worker calls: glossary lookup, digest, prepare and restore for a micro-batch.

One :class:`FidelityService` per worker. For each request, in order:

1. :meth:`FidelityService.glossary` — the request's named glossary (from the
   worker's :class:`~pipeline.fidelity.glossary_store.GlossaryCache`) merged with its
   inline terms; a named glossary that does not exist is an input error
   (reason ``glossary_not_found``), Redis being unreachable with no copy
   held is transient (:class:`~pipeline.fidelity.glossary_store.GlossaryUnavailable`);
2. :meth:`FidelityService.digest` — the cache/dedup digest, which includes
   that glossary's version;
3. :meth:`FidelityService.prepare` — the engine segments (malformed markup is
   an input error, reason ``bad_markup``);
4. :meth:`FidelityService.restore` — all prepared requests of one pair
   through the engine, batched per round, to a :class:`Restored` text or a
   :class:`Failed` one (reason ``bad_output``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pipeline.contract.digest import request_digest
from pipeline.contract.messages import TranslationRequest, tenant_label
from pipeline.contract.pairs import Pair
from pipeline.engine.translator import Translator
from pipeline.fidelity.drive import TranslatorEngine, drive
from pipeline.fidelity.glossary import Glossary, Term
from pipeline.fidelity.glossary_store import GlossaryCache, GlossaryStore
from pipeline.fidelity.markup import BadMarkup
from pipeline.fidelity.prepare import FidelityConfig, Prepared, prepare
from pipeline.fidelity.restore import Failed, Restoration, Restored
from pipeline.settings import Settings


@dataclass(frozen=True, slots=True)
class Rejected:
    """A request the fidelity layer refuses on its own merits (an ``error`` result)."""

    reason: str
    message: str


class FidelityService:
    """Prepare and restore requests for one worker (pure, apart from the glossary cache)."""

    def __init__(self, config: FidelityConfig, glossaries: GlossaryCache | None) -> None:
        self.config = config
        self.glossaries = glossaries

    @classmethod
    def from_settings(
        cls, settings: Settings, store: GlossaryStore | None = None
    ) -> FidelityService:
        """The service configured by ``settings.fidelity``, glossaries read from Redis."""
        fidelity = settings.fidelity
        store = store or GlossaryStore(settings.redis)
        cache = GlossaryCache(store.get, fidelity.glossary_refresh_s)
        return cls(FidelityConfig.build(fidelity.extra_patterns, fidelity.attributes), cache)

    def glossary(self, request: TranslationRequest) -> Glossary | Rejected | None:
        """The terms that apply to ``request`` (inline terms win over the named glossary)."""
        stored: Glossary | None = None
        if request.glossary is not None:
            if self.glossaries is None:
                return Rejected("glossary_not_found", "this worker has no glossary store")
            # a request without a tenant is the default tenant's, as for quotas and fair share
            tenant = tenant_label(request.tenant)
            stored = self.glossaries.get(tenant, request.pair.id, request.glossary)
            if stored is None:
                return Rejected(
                    "glossary_not_found",
                    f"no glossary {request.glossary!r} for tenant {tenant!r} "
                    f"and pair {request.pair.id}",
                )
        if not request.terms:
            return stored
        inline = [Term(t.source, t.target) for t in request.terms]
        try:
            return Glossary(
                [*(stored.terms if stored else ()), *inline],
                name=request.glossary,
                version=stored.version if stored else 0,
            )
        except ValueError as exc:
            return Rejected("invalid", f"inline terms: {exc}")

    @staticmethod
    def digest(request: TranslationRequest, model_id: str, glossary: Glossary | None) -> str:
        """The request's cache and dedup digest, with the version of its named glossary."""
        version = glossary.version if glossary is not None and request.glossary else None
        return request_digest(request, model_id, version)

    def prepare(
        self, request: TranslationRequest, glossary: Glossary | None
    ) -> Prepared | Rejected:
        """The request's engine segments, or why its text cannot be taken."""
        try:
            return prepare(request.text, request.format or "text", self.config, glossary)
        except BadMarkup as exc:
            return Rejected("bad_markup", f"malformed {request.format}: {exc}")

    @staticmethod
    async def restore(
        prepared: Sequence[Prepared],
        translator: Translator,
        pair: Pair,
        executor: Executor | None = None,
    ) -> list[Restored | Failed]:
        """Translate every prepared request of ``pair``: one engine call per round."""
        engine = TranslatorEngine(translator, pair, executor)
        restorations = [Restoration(p, engine) for p in prepared]
        await drive(restorations, engine, [pair] * len(restorations))
        return [r.outcome() for r in restorations]


def result_fields(restored: Restored, glossary: Glossary | None) -> dict[str, Any]:
    """The TranslationResult fields of an ok result the fidelity layer produced."""
    fields: dict[str, Any] = {
        "translation": restored.text,
        "fidelity": restored.fidelity,
        "input_tokens": restored.input_tokens,
        "output_tokens": restored.output_tokens,
    }
    if restored.glossary_hits:
        fields["glossary_hits"] = [
            {"source": h.source, "target": h.target, "count": h.count}
            for h in restored.glossary_hits
        ]
    if glossary is not None and glossary.name is not None:
        fields["glossary_version"] = glossary.version
    return fields
