"""The hot paths, composed in one place: read them top to bottom.

Every path ends in one more step outside the chain, because it spans a
batch's attempts and however its records ended (published, dead-lettered or
set apart): *commit*. Once the runner returns, the worker's shell marks the
batch's offsets done (``OffsetKeeper.done`` in ``workers/offset_keeper.py``) and
the offset book commits them, never past a record still in flight.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.contract.pairs import Pair
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
from pipeline.steps.fidelity import ApplyGlossary, TranslateFaithfully
from pipeline.steps.handoff import HandOff
from pipeline.steps.isolation import Chain
from pipeline.steps.observe import Observe, StatsSink
from pipeline.steps.publish import Producer, Publish
from pipeline.steps.quarantine import Quarantine, QuarantineLookup
from pipeline.steps.quota import QuotaCheck, Quotas
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.resolve import Resolve
from pipeline.steps.route import Route
from pipeline.steps.store import Store
from pipeline.steps.trace import CloseSpans, OpenSpans
from pipeline.steps.translate import EngineRunner, Translate
from pipeline.steps.window import DedupWindow, WindowLookup
from pipeline.storage.cache import TwoLevelCache


def translation_steps(
    *,
    model: str,
    serves: Callable[[Pair], bool],
    limits: LimitSettings,
    window: DedupWindow,
    cache: TwoLevelCache,
    engine: EngineRunner,
    producer: Producer,
    totals: StatsSink,
    compute_type: str,
    cancels: CancelLookup,
    quarantine: QuarantineLookup,
    control_wait_s: float,
    quotas: Quotas,
    replies: ReplyCopies,
    recent_translations: int,
    fidelity: FidelityService | None = None,
) -> Chain:
    """A translation agent's micro-batch: one result (or dead letter) per record.

    Quarantined, expired and cancelled requests are answered first, and those
    over their tenant's quota before any lookup. Past the engine the batch
    hands off: the agent's next one may start while this one stores and
    publishes. With ``fidelity``, glossaries key the digest before any lookup
    and the engine step keeps markup, placeholders and terms
    (``pipeline.fidelity``); ``model`` names the agent's model in metrics.
    ``recent_translations``: how many finished
    translations the engine step keeps for later batches
    (``worker.recent_translations``); ``control_wait_s``: how long a batch
    waits at start for the cancel and quarantine topics to be read; ``serves``:
    whether the agent's model translates a pair (a request for another is a dead
    letter).
    """
    return Chain(
        decide=(
            Decode(limits, serves),
            Quarantine(quarantine, limits, control_wait_s),
            OpenSpans(compute_type),
            Deadline(limits.default_timeout_ms),
            Cancel(cancels, control_wait_s),
            *([ApplyGlossary(fidelity)] if fidelity else []),
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
        ),
        publish=_publish(producer, replies, totals, compute_type, model),
    )


def routing_steps(
    *,
    router: Router,
    limits: LimitSettings,
    quarantine: QuarantineLookup,
    control_wait_s: float,
    producer: Producer,
    totals: StatsSink,
    replies: ReplyCopies,
) -> Chain:
    """The router's micro-batch: every ingress record to where it belongs."""
    return Chain(
        decide=(Quarantine(quarantine, limits, control_wait_s), Route(router)),
        publish=_publish(producer, replies, totals, None, None),
    )


def _publish(
    producer: Producer,
    replies: ReplyCopies,
    totals: StatsSink,
    compute_type: str | None,
    model: str | None,
) -> tuple[Step, ...]:
    """What every agent does with a decided batch: records out, acknowledged, counted
    (``model`` None: the router's, which counts what it routed, and has no spans)."""
    return (
        Emit(),
        Publish(producer),
        replies,
        *([CloseSpans(compute_type)] if compute_type is not None else []),
        Observe(totals, model),
    )
