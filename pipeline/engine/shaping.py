"""Where a worker's engine step gets its batch shape from, per model and priority.

:class:`BatchShaper` is the one object the worker asks before a take (how
many messages, how long to wait) and before planning (the batcher), and tells
after a micro-batch what happened. It serves:

* interactive work with static settings (``worker.max_messages``,
  ``max_wait_s``, ``token_budget``), or, with ``batching.adaptive``, with the
  knobs of an :class:`~pipeline.engine.adaptive.AdaptiveBatching` controller
  fed by each micro-batch and by the SLA job's windows of the model's pairs
  (:meth:`BatchShaper.add` takes an :class:`~pipeline.contract.messages.SlaWindow`, so
  a shaper is a sink for the dashboard's ``SlaFollower``);
* bulk work with its own static size and budget, and every bulk call cut so
  its estimated time stays within ``batching.bulk_max_call_s`` (a running
  call cannot be pre-empted: this bounds how long interactive work waits).

Both plan with the model's measured call-cost model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pipeline.contract.messages import SlaWindow
from pipeline.contract.pairs import Pair
from pipeline.engine.adaptive import (
    AdaptiveBatching,
    BatchingKnobs,
    ControllerLimits,
    state_values,
)
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.costs import CostModel
from pipeline.errors import ContractError
from pipeline.observability import metrics
from pipeline.settings import Settings

log = logging.getLogger(__name__)


class BatchShaper:
    """Batch shape for one model and priority: static, or adaptive (interactive only)."""

    def __init__(
        self,
        settings: Settings,
        model: str,
        serves: Callable[[Pair], bool],
        cost: CostModel,
        *,
        bulk: bool,
        replicas: int = 1,
    ) -> None:
        """``serves``: whether the model translates a pair (its SLA windows count);
        ``replicas``: the engine calls of this model and priority that may run at once.

        The latency objective is the tightest one set for a pair it serves, else
        the default.
        """
        w, b = settings.worker, settings.batching
        self.model = model
        self._serves = serves
        self.cost = cost
        self.bulk = bulk
        self._max_call_s = b.bulk_max_call_s if bulk else None
        self._static = (
            BatchingKnobs(w.max_wait_s, w.bulk_max_messages, w.bulk_token_budget)
            if bulk
            else BatchingKnobs(w.max_wait_s, w.max_messages, w.token_budget)
        )
        self.controller: AdaptiveBatching | None = None
        if b.adaptive and not bulk:
            objective = min(
                [ms for pair_id, ms in b.p95_ms.items() if serves(Pair.parse(pair_id))],
                default=b.default_p95_ms,
            )
            limits = ControllerLimits(
                p95_ms=objective, min_wait_s=b.min_wait_s, max_messages=b.adaptive_max_messages
            )
            self.controller = AdaptiveBatching(limits, cost, replicas=replicas)
            metrics.set_batching_knobs(model, state_values(self.controller.state))
        self._lag: int | None = None
        self._lag_growing = False

    @property
    def knobs(self) -> BatchingKnobs:
        """What the next take and plan use."""
        return self.controller.knobs if self.controller else self._static

    def batcher(self) -> TokenBudgetBatcher:
        """The planner for the next micro-batch (cost-based, with the current budget)."""
        return TokenBudgetBatcher(
            self.knobs.token_budget, cost=self.cost, max_call_s=self._max_call_s
        )

    def observe(
        self,
        *,
        submitted_ms: Sequence[int],
        started_ms: int,
        taken: int,
        service_s: float,
        lengths: Sequence[int],
        estimated_s: float | None = None,
    ) -> None:
        """One micro-batch done: ``taken`` messages, the first started at ``started_ms``.

        ``submitted_ms`` are its requests' submission times, ``lengths`` the
        token counts of what reached the engine, ``service_s`` the engine time,
        ``estimated_s`` what the planner's cost model expected of those calls.
        """
        if self.controller is None or not submitted_ms:
            return
        mode = self.controller.state.mode
        self.controller.observe_batch(
            size=taken,
            full=taken >= self.knobs.max_messages,
            queue_delay_s=max(0.0, (started_ms - min(submitted_ms)) / 1000),
            service_s=service_s,
            mean_tokens=sum(lengths) / len(lengths) if lengths else 0.0,
            longest_tokens=max(lengths, default=0),
            newest_submitted_s=max(submitted_ms) / 1000,
            estimated_s=estimated_s,
        )
        state = self.controller.state
        if state.mode != mode:
            # a mode change is what explains a step in a model's latency or throughput
            log.info(
                "%s: batching %s -> %s mode (queue %.2f s, engine %.2f s, %.1f arrivals/s); "
                "up to %d messages",
                self.model,
                mode,
                state.mode,
                state.queue_delay_s,
                state.service_s,
                state.arrivals_per_s,
                state.knobs.max_messages,
            )
        metrics.set_batching_knobs(self.model, state_values(state))

    def lag(self, records: int) -> None:
        """The work topic's consumer lag, sampled (whether a backlog is building)."""
        self._lag_growing = self._lag is not None and records > self._lag
        self._lag = records

    def add(self, window: SlaWindow) -> None:
        """An SLA window of a pair closed (outer loop); other models' pairs are ignored."""
        if self.controller is None or window.priority != "interactive":
            return
        try:
            pair = Pair.parse(window.pair)
        except ContractError:  # the "unsupported" series
            return
        if not self._serves(pair):
            return
        self.controller.observe_window(window.p95_ms, window.count, lag_growing=self._lag_growing)
        metrics.set_batching_knobs(self.model, state_values(self.controller.state))
