"""The hot paths, composed in one place: read them top to bottom."""

from __future__ import annotations

from pipeline.cache import TwoLevelCache
from pipeline.fidelity.service import FidelityService
from pipeline.routing import Router
from pipeline.settings import LimitSettings
from pipeline.steps.base import Step
from pipeline.steps.cache import CacheLookup
from pipeline.steps.cancel import Cancel, CancelLookup
from pipeline.steps.deadline import Deadline
from pipeline.steps.decode import Decode
from pipeline.steps.dedup import InBatchDedup
from pipeline.steps.emit import Emit
from pipeline.steps.engine import EngineRunner, Translate
from pipeline.steps.fidelity import ApplyGlossary, TranslateFaithfully
from pipeline.steps.handoff import HandOff
from pipeline.steps.observe import Observe, StatsSink
from pipeline.steps.publish import Producer, Publish
from pipeline.steps.quota import QuotaCheck, Quotas
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.resolve import Resolve
from pipeline.steps.route import Route
from pipeline.steps.store import Store
from pipeline.steps.trace import CloseSpans, OpenSpans
from pipeline.steps.window import DedupWindow, WindowLookup


def translation_steps(
    *,
    limits: LimitSettings,
    window: DedupWindow,
    cache: TwoLevelCache,
    engine: EngineRunner,
    producer: Producer,
    totals: StatsSink,
    compute_type: str,
    cancels: CancelLookup,
    quotas: Quotas,
    replies: ReplyCopies,
    recent_translations: int,
    fidelity: FidelityService | None = None,
) -> list[Step]:
    """A translation agent's micro-batch: one result (or dead letter) per record.

    Cancelled requests and those over their tenant's quota are answered before
    any lookup. Past the engine the batch hands off: the agent's next one may
    start while this one stores and publishes. With ``fidelity``, glossaries key
    the digest before any lookup and the engine step keeps markup, placeholders
    and terms (``pipeline.fidelity``). ``recent_translations``: how many finished
    translations the engine step keeps for later batches (``worker.recent_translations``).
    """
    return [
        Decode(limits),
        *([ApplyGlossary(fidelity)] if fidelity else []),
        OpenSpans(compute_type),
        Deadline(limits.default_timeout_ms),
        Cancel(cancels),
        QuotaCheck(quotas),
        InBatchDedup(),
        WindowLookup(window),
        CacheLookup(cache),
        (
            TranslateFaithfully(engine, fidelity, recent_translations)
            if fidelity
            else Translate(engine, recent_translations)
        ),
        HandOff(),
        Store(cache, window),
        Resolve(),
        Emit(),
        Publish(producer),
        replies,
        CloseSpans(compute_type),
        Observe(totals),
    ]


def routing_steps(
    *, router: Router, producer: Producer, totals: StatsSink, replies: ReplyCopies
) -> list[Step]:
    """The router's micro-batch: every ingress record to where it belongs."""
    return [Route(router), Publish(producer), replies, Observe(totals)]
