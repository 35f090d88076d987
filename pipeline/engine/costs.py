"""What one engine call costs, as a function of its shape, fitted from timings.

A Transformer pads every sequence of a call to the longest one, and a
decoder takes one step per output token, each step reading all the weights
once however many sequences it carries. So the time of one call of ``n``
sequences whose longest has ``max_len`` tokens is modelled as::

    seconds = per_call + per_step * max_len + per_token * n * max_len

``n * max_len`` is the call's padded tokens. ``per_step`` is the part of the
per-call cost that grows with the length of the call (on an OPUS-MT-sized
model on CPU it dominates: ~30 ms per step against ~4 ms per padded token,
measured under load); a model without it is the plain "padded tokens ×
per-token cost + per-call cost". The coefficients are fitted by least squares
of the relative errors with every coefficient kept non-negative
(:func:`fit_cost_model`), from calls timed at a few shapes in rounds until the
fit explains each of them (:func:`calibrate`).

The fit decides how the batcher cuts every micro-batch, so a bad one is
costly: timings taken during a burst of load once fitted a model with no
per-call and no per-step cost, under which one text per engine call is the
cheapest plan, and the worker kept planning so.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# Shapes (sequences, tokens each) timed by :func:`calibrate`: short and long
# calls, single sequences and batches, so all three coefficients are visible.
CALIBRATION_SHAPES: tuple[tuple[int, int], ...] = (
    (1, 8),
    (1, 24),
    (8, 8),
    (8, 24),
    (24, 8),
    (24, 16),
)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Estimated seconds of one engine call (see the module docstring)."""

    per_call_s: float
    per_step_s: float
    per_token_s: float

    def __post_init__(self) -> None:
        if min(self.per_call_s, self.per_step_s, self.per_token_s) < 0:
            raise ValueError("cost coefficients must be >= 0")
        if self.per_call_s + self.per_step_s + self.per_token_s <= 0:
            raise ValueError("at least one cost coefficient must be > 0")

    def seconds(self, n: int, max_len: int) -> float:
        """Estimated time of one call of ``n`` sequences padded to ``max_len`` tokens."""
        return self.per_call_s + self.per_step_s * max_len + self.per_token_s * n * max_len

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CostModel:
        return cls(float(data["per_call_s"]), float(data["per_step_s"]), float(data["per_token_s"]))


# Until a model is measured: calls cost about as much as 200 padded tokens.
DEFAULT_COST = CostModel(per_call_s=2e-3, per_step_s=0.0, per_token_s=1e-5)


@dataclass(frozen=True, slots=True)
class Timing:
    """One timed engine call."""

    n: int
    max_len: int
    seconds: float


# A fit whose estimate is further than this from one of its timings (relative) was
# measured during a burst of load: a quiet machine's timings fit within ~0.2.
FIT_TOLERANCE = 0.3
# Calibration rounds: at least this many, then more until the fit is within tolerance.
MIN_CALIBRATION_ROUNDS = 2
MAX_CALIBRATION_ROUNDS = 8


def fit_error(model: CostModel, timings: Sequence[Timing]) -> float:
    """The largest relative difference between ``model``'s estimate and a timing."""
    return max(
        (abs(model.seconds(t.n, t.max_len) - t.seconds) / t.seconds for t in timings if t.seconds),
        default=0.0,
    )


def fit_cost_model(timings: Sequence[Timing]) -> CostModel:
    """Least-squares fit of the relative errors, with non-negative coefficients.

    The timings span two orders of magnitude, so an absolute fit would be
    decided by the largest call's noise alone: each timing is weighted by its
    inverse. Tries every subset of the three terms, fits each by ordinary least
    squares, and keeps the non-negative fit with the smallest residual (an
    exact non-negative least squares for three unknowns).
    """
    if len(timings) < 3:
        raise ValueError("need at least 3 timings to fit 3 coefficients")
    features = np.array([[1.0, t.max_len, t.n * t.max_len] for t in timings])
    target = np.array([t.seconds for t in timings])
    weights = 1.0 / np.maximum(target, 1e-9)
    best: tuple[float, np.ndarray] | None = None
    for size in (3, 2, 1):
        for terms in itertools.combinations(range(3), size):
            columns = list(terms)
            coef, *_ = np.linalg.lstsq(
                features[:, columns] * weights[:, None], target * weights, rcond=None
            )
            if (coef < 0).any() or not (coef > 0).any():
                continue
            full = np.zeros(3)
            full[columns] = coef
            residual = float(np.sum(((features @ full - target) * weights) ** 2))
            if best is None or residual < best[0] - 1e-15:
                best = (residual, full)
    if best is None:
        raise ValueError("no non-negative cost model fits these timings")
    per_call, per_step, per_token = (float(c) for c in best[1])
    return CostModel(per_call, per_step, per_token)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted cost model, the timings it was fitted to and how well it fits them."""

    cost: CostModel
    timings: list[Timing]
    rounds: int
    error: float  # fit_error of cost on timings

    @property
    def fits(self) -> bool:
        """Whether the model explains every timing within :data:`FIT_TOLERANCE`."""
        return self.error <= FIT_TOLERANCE


def calibrate(
    run: Callable[[int, int], object],
    shapes: Iterable[tuple[int, int]] = CALIBRATION_SHAPES,
    *,
    min_rounds: int = MIN_CALIBRATION_ROUNDS,
    max_rounds: int = MAX_CALIBRATION_ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
) -> Calibration:
    """Time ``run(n, max_len)`` at each shape, in rounds, and fit a model to the fastest.

    ``run`` performs one engine call of that shape and returns when it is
    done; the first call is a warm-up and not counted. A round times every
    shape once, so a burst of load from other processes slows several shapes
    a little rather than every call of one. Load only ever adds time, so each
    shape's fastest call nears its time on a quiet machine as rounds go on:
    after ``min_rounds`` rounds, calibration stops as soon as the fit explains
    every shape's fastest call within :data:`FIT_TOLERANCE`, else after
    ``max_rounds`` (the result says how well it fits).
    """
    if not 1 <= min_rounds <= max_rounds:
        raise ValueError("need 1 <= min_rounds <= max_rounds")
    shapes = list(shapes)
    run(*shapes[0])  # warm-up: first-call allocations
    fastest = [float("inf")] * len(shapes)
    rounds = 0
    while True:
        for i, (n, max_len) in enumerate(shapes):
            began = clock()
            run(n, max_len)
            fastest[i] = min(fastest[i], clock() - began)
        rounds += 1
        if rounds < min_rounds:
            continue
        timings = [Timing(n, m, s) for (n, m), s in zip(shapes, fastest, strict=True)]
        cost = fit_cost_model(timings)
        calibration = Calibration(cost, timings, rounds, fit_error(cost, timings))
        if calibration.fits or rounds >= max_rounds:
            return calibration
