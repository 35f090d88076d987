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
with every coefficient kept non-negative (:func:`fit_cost_model`), from calls
timed at a few shapes (:func:`calibrate`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pipeline.contract.pairs import Pair

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


def cost_of(translator: object, pair: Pair) -> CostModel:
    """The translator's measured call costs for ``pair``, or :data:`DEFAULT_COST`."""
    measured = getattr(translator, "cost_model", None)
    return measured(pair) if callable(measured) else DEFAULT_COST


@dataclass(frozen=True, slots=True)
class Timing:
    """One timed engine call."""

    n: int
    max_len: int
    seconds: float


def fit_cost_model(timings: Sequence[Timing]) -> CostModel:
    """Least-squares fit with non-negative coefficients.

    Tries every subset of the three terms, fits each by ordinary least
    squares, and keeps the non-negative fit with the smallest residual (an
    exact non-negative least squares for three unknowns).
    """
    if len(timings) < 3:
        raise ValueError("need at least 3 timings to fit 3 coefficients")
    features = np.array([[1.0, t.max_len, t.n * t.max_len] for t in timings])
    target = np.array([t.seconds for t in timings])
    best: tuple[float, np.ndarray] | None = None
    for size in (3, 2, 1):
        for terms in itertools.combinations(range(3), size):
            columns = list(terms)
            coef, *_ = np.linalg.lstsq(features[:, columns], target, rcond=None)
            if (coef < 0).any() or not (coef > 0).any():
                continue
            full = np.zeros(3)
            full[columns] = coef
            residual = float(np.sum((features @ full - target) ** 2))
            if best is None or residual < best[0] - 1e-15:
                best = (residual, full)
    if best is None:
        raise ValueError("no non-negative cost model fits these timings")
    per_call, per_step, per_token = (float(c) for c in best[1])
    return CostModel(per_call, per_step, per_token)


def calibrate(
    run: Callable[[int, int], object],
    shapes: Iterable[tuple[int, int]] = CALIBRATION_SHAPES,
    *,
    repeats: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[CostModel, list[Timing]]:
    """Time ``run(n, max_len)`` at each shape (best of ``repeats``) and fit a model.

    ``run`` performs one engine call of that shape and returns when it is
    done; the first call is a warm-up and not counted. Taking the best of a
    few repeats keeps other processes' noise out of the fit.
    """
    shapes = list(shapes)
    run(*shapes[0])  # warm-up: first-call allocations
    timings = []
    for n, max_len in shapes:
        best = float("inf")
        for _ in range(repeats):
            began = clock()
            run(n, max_len)
            best = min(best, clock() - began)
        timings.append(Timing(n, max_len, best))
    return fit_cost_model(timings), timings
