"""SLA-aware adaptive batching: batch shape from the latency objective and the load.

Large batches make the engine efficient (a model of realistic size gains
~7× from batching on CPU) but every request of a batch waits for the whole
call, and a long ``max_wait`` makes a lone request wait for company that
never comes. :class:`AdaptiveBatching` is a pure controller — no clock, no
I/O — that turns what the worker observes into the knobs of the next take
and plan (:class:`BatchingKnobs`: ``max_wait_s``, ``max_messages``,
``token_budget``), per pair, with two loops:

* **inner, per micro-batch** (:meth:`AdaptiveBatching.observe_batch`): the
  queueing delay of the batch's oldest request, whether the take came back
  full, the engine's service time and the texts' lengths. Below saturation
  it is in *latency* mode: batches whose cost-model estimate stays within
  ``latency_share`` of the objective, so P95 stays under it, but never so
  small that serving the observed arrival rate would keep the engine busier
  than ``max_utilisation`` (a batch cap below the arrival rate only grows the
  queue, which costs more latency than a larger call; and a cap a burst of
  arrivals fills leaves the rest a whole call to wait, so the floor keeps
  the engine well under busy). That floor takes the
  cost model's estimates times the measured ratio of engine time to them
  (``cost_correction``): a model measured on a quieter machine, or a busier
  one now, would otherwise choose batches that cannot keep up. Under a backlog (takes come back
  full, or requests queue longer than the objective, for a few batches in a
  row) it switches to *throughput* mode: the batch size where the engine's
  cost per text stops falling (the cost model's plateau), since queueing then
  dominates latency and only throughput drains it. It returns to latency
  mode when the backlog is gone.
* **outer, per SLA window** (:meth:`AdaptiveBatching.observe_window`, fed
  from the SLA job's ``translate.sla``): a window whose P95 is over the
  objective shrinks ``latency_share`` (smaller, quicker batches); a window
  well under it while a backlog builds grows it back.

``max_wait`` stays at its minimum in both modes. On a single engine,
requests that arrive while it computes are taken together by the next take
anyway, so waiting for company only adds latency: in the simulated queue of
``tests/unit/engine/test_engine_adaptive.py`` a wait of a tenth of the objective
raised P95 by 10-35% at every load tried (5 to 90 requests/s, up to
saturation). The knob is kept (and reported) because a take's wait is where Kafka's
own fetch latency hides; the controller only sets it to its floor.

Each pair has its own controller and objective (``BatchingSettings``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.engine.costs import CostModel

LATENCY = "latency"
THROUGHPUT = "throughput"
# a cost model more than this far off is a model to re-measure, not one to scale
_MAX_CORRECTION = 4.0


@dataclass(frozen=True, slots=True)
class BatchingKnobs:
    """What the next take and plan use."""

    max_wait_s: float
    max_messages: int
    token_budget: int


@dataclass(frozen=True, slots=True)
class ControllerLimits:
    """Objective and bounds of one pair's controller."""

    p95_ms: float
    min_wait_s: float = 0.002
    min_messages: int = 1
    max_messages: int = 256
    # share of the objective the engine call may take in latency mode (the rest
    # is queueing, the take's wait and Kafka); adjusted by the outer loop
    latency_share: float = 0.5
    min_latency_share: float = 0.1
    max_latency_share: float = 0.8
    # latency mode's batches must serve the arrival rate with the engine at most this
    # busy. Low, since arrivals come in bursts: a cap a burst fills leaves requests for
    # a whole extra call (simulated P95 at 40 % load, OPUS-MT-sized model: 1.19x that
    # of taking all that waits at 0.8, 1.00x at 0.3)
    max_utilisation: float = 0.3
    # a batch size is on the plateau once its cost per text is within this of the best
    plateau_tolerance: float = 0.02
    # consecutive batches that must agree before the mode changes
    hysteresis: int = 3


@dataclass(frozen=True, slots=True)
class ControllerState:
    """What the controller believes, for metrics and the dashboard."""

    mode: str
    knobs: BatchingKnobs
    latency_share: float
    queue_delay_s: float
    service_s: float
    typical_tokens: float
    longest_tokens: float
    arrivals_per_s: float = 0.0
    # measured engine time over the cost model's estimate (1.0: the model is right)
    cost_correction: float = 1.0


def state_values(state: ControllerState) -> dict[str, float]:
    """The controller's state as named numbers (``babelstream_batching_knob``)."""
    return {
        "max_wait_seconds": state.knobs.max_wait_s,
        "max_messages": state.knobs.max_messages,
        "token_budget": state.knobs.token_budget,
        "throughput_mode": 1.0 if state.mode == THROUGHPUT else 0.0,
        "latency_share": state.latency_share,
        "queue_delay_seconds": state.queue_delay_s,
        "service_seconds": state.service_s,
        "arrivals_per_second": state.arrivals_per_s,
        "cost_correction": state.cost_correction,
    }


class AdaptiveBatching:
    """Per-pair controller of ``max_wait``, batch size and token budget (see module doc)."""

    def __init__(
        self,
        limits: ControllerLimits,
        cost: CostModel,
        *,
        smoothing: float = 0.3,
        initial_tokens: float = 32.0,
        replicas: int = 1,
    ) -> None:
        """``replicas``: the engine calls this pair's batches may run side by side."""
        if limits.p95_ms <= 0:
            raise ValueError("the latency objective must be > 0 ms")
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        self.limits = limits
        self.cost = cost
        self.replicas = replicas
        self._alpha = smoothing
        self._share = limits.latency_share
        self._mode = LATENCY
        self._votes = 0  # consecutive batches voting for the other mode
        self._queue_s = 0.0
        self._service_s = 0.0
        self._tokens = initial_tokens
        self._longest = initial_tokens
        self._arrivals_per_s = 0.0
        self._newest_submitted_s: float | None = None
        self._correction = 1.0
        self._knobs = self._latency_knobs()

    @property
    def knobs(self) -> BatchingKnobs:
        return self._knobs

    @property
    def state(self) -> ControllerState:
        return ControllerState(
            self._mode,
            self._knobs,
            self._share,
            self._queue_s,
            self._service_s,
            self._tokens,
            self._longest,
            self._arrivals_per_s,
            self._correction,
        )

    def observe_batch(
        self,
        *,
        size: int,
        full: bool,
        queue_delay_s: float,
        service_s: float,
        mean_tokens: float,
        longest_tokens: float,
        newest_submitted_s: float | None = None,
        estimated_s: float | None = None,
    ) -> BatchingKnobs:
        """One micro-batch done: update the estimates, maybe switch mode, return new knobs.

        ``queue_delay_s`` is how long the batch's oldest request waited before
        processing began; ``full`` whether the take returned ``max_messages``
        (more was waiting); ``service_s`` the engine time of the batch;
        ``newest_submitted_s`` when its newest request was submitted (any
        clock, the same for every batch): ``size`` requests arrived since the
        previous batch's newest, which gives the arrival rate;
        ``estimated_s`` what the cost model said the batch's engine calls
        would take: ``service_s`` over it corrects every later estimate.
        """
        a = self._alpha
        self._observe_arrivals(size, newest_submitted_s)
        if estimated_s is not None and estimated_s > 0 and service_s > 0:
            ratio = min(_MAX_CORRECTION, max(1 / _MAX_CORRECTION, service_s / estimated_s))
            self._correction += a * (ratio - self._correction)
        self._queue_s += a * (queue_delay_s - self._queue_s)
        self._service_s += a * (service_s - self._service_s)
        if size > 0 and mean_tokens > 0:
            self._tokens += a * (mean_tokens - self._tokens)
            self._longest += a * (max(longest_tokens, mean_tokens) - self._longest)
        target_s = self.limits.p95_ms / 1000
        # waiting out max_wait is not a backlog; queueing past it, or a full take, is
        backlog = full or queue_delay_s - self._knobs.max_wait_s > target_s
        wants = THROUGHPUT if backlog else LATENCY
        self._votes = self._votes + 1 if wants != self._mode else 0
        if self._votes >= self.limits.hysteresis:
            self._mode, self._votes = wants, 0
        self._knobs = (
            self._throughput_knobs() if self._mode == THROUGHPUT else (self._latency_knobs())
        )
        return self._knobs

    def _observe_arrivals(self, size: int, newest_s: float | None) -> None:
        if newest_s is None:
            return
        previous, self._newest_submitted_s = self._newest_submitted_s, newest_s
        if previous is not None and newest_s > previous and size > 0:
            rate = size / (newest_s - previous)
            self._arrivals_per_s += self._alpha * (rate - self._arrivals_per_s)

    def observe_window(self, p95_ms: float, count: int, *, lag_growing: bool) -> BatchingKnobs:
        """One SLA window of this pair closed (outer loop): nudge the latency share."""
        if count <= 0:
            return self._knobs
        limits = self.limits
        if p95_ms > limits.p95_ms:
            self._share = max(limits.min_latency_share, self._share * 0.8)
        elif p95_ms < 0.5 * limits.p95_ms and lag_growing:
            self._share = min(limits.max_latency_share, self._share * 1.25)
        if self._mode == LATENCY:
            self._knobs = self._latency_knobs()
        return self._knobs

    def _per_text_s(self, n: int) -> float:
        return self.cost.seconds(n, math.ceil(self._longest)) / n

    def _latency_knobs(self) -> BatchingKnobs:
        """Short wait; the largest batch whose estimated call fits the latency share,
        or the smallest that keeps up with the arrival rate, if that is larger."""
        limits = self.limits
        target_s = limits.p95_ms / 1000
        allowed = self._share * target_s
        longest = math.ceil(self._longest)
        n = limits.min_messages
        while n < limits.max_messages and self.cost.seconds(n + 1, longest) <= allowed:
            n += 1
        # keeping up is judged by the engine's measured speed, every replica computing;
        # the share above stays the model's, since smaller calls on a slow engine only
        # queue more (the outer loop tunes the share from the measured P95 instead)
        needed_per_s = self._arrivals_per_s / limits.max_utilisation
        while (
            n < limits.max_messages
            and self.replicas * n / (self.cost.seconds(n, longest) * self._correction)
            < needed_per_s
        ):
            n += 1
        return BatchingKnobs(self.limits.min_wait_s, n, self._budget(n))

    def _throughput_knobs(self) -> BatchingKnobs:
        """The smallest batch on the cost plateau (more only adds latency)."""
        limits = self.limits
        sizes = range(limits.min_messages, limits.max_messages + 1)
        best = min(self._per_text_s(n) for n in sizes)
        n = next(n for n in sizes if self._per_text_s(n) <= best * (1 + limits.plateau_tolerance))
        return BatchingKnobs(self.limits.min_wait_s, n, self._budget(n))

    def _budget(self, n: int) -> int:
        # room for n texts of the typical longest length: the planner cuts the rest
        return max(1, math.ceil(n * self._longest))
