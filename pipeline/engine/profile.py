"""Engine profiles by measurement: the fastest compute type and the call-cost model.

What is fastest depends on the model and the machine (on the 1.6 MB demo
model float32 beat int8 at large batches; on an OPUS-MT-sized model int8
wins), so ``compute_type = "auto"`` is decided by timing. For each loaded
model the worker times the candidate compute types the device supports at
one batch shape (:func:`choose_compute_type`), keeps the fastest, fits the
chosen type's :class:`~pipeline.engine.costs.CostModel`, logs both and
caches them under ``var/`` by model fingerprint, machine and thread count
(:class:`ProfileCache`), so later starts on the same machine skip the
measurement. A profile whose cost model does not explain its own timings
(:attr:`EngineProfile.fits`) is used for the run but not cached, and a cached
one that does not is measured again.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.engine.costs import FIT_TOLERANCE, CostModel, Timing, calibrate, fit_error

log = logging.getLogger(__name__)

# Candidates in order of preference when two measure the same. On CPU, int8
# *is* int8_float32 (CTranslate2 keeps activations in float32 there: a model
# loaded as int8 reports int8_float32), so timing both would time one twice.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "cpu": ("int8", "float32"),
    "cuda": ("int8_float16", "float16", "bfloat16"),
}


class EngineProbe(Protocol):
    """One loaded model at one compute type, able to run calls of a given shape."""

    def run(self, n: int, max_len: int) -> None:
        """One blocking engine call of ``n`` sequences of ``max_len`` tokens, ``max_len`` out."""
        ...


@dataclass(frozen=True, slots=True)
class ComputeTypeChoice:
    """The fastest compute type and what each candidate measured (padded tokens/s)."""

    compute_type: str
    tokens_per_s: dict[str, float]


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """What was measured for one model on one machine."""

    compute_type: str
    cost: CostModel
    tokens_per_s: dict[str, float] = field(default_factory=dict)
    timings: list[Timing] = field(default_factory=list)
    measured_at: float = 0.0

    @property
    def fit_error(self) -> float:
        """How far the cost model is from its timings (largest relative difference)."""
        return fit_error(self.cost, self.timings)

    @property
    def fits(self) -> bool:
        """Whether the cost model explains its timings: one that does not was measured
        during a burst of load, and is not kept for later starts."""
        return self.fit_error <= FIT_TOLERANCE

    def to_json(self) -> dict[str, Any]:
        return {
            "compute_type": self.compute_type,
            "cost": self.cost.to_json(),
            "tokens_per_s": self.tokens_per_s,
            "timings": [[t.n, t.max_len, round(t.seconds, 6)] for t in self.timings],
            "measured_at": self.measured_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineProfile:
        return cls(
            compute_type=str(data["compute_type"]),
            cost=CostModel.from_json(data["cost"]),
            tokens_per_s={k: float(v) for k, v in data.get("tokens_per_s", {}).items()},
            timings=[Timing(int(n), int(m), float(s)) for n, m, s in data.get("timings", [])],
            measured_at=float(data.get("measured_at", 0.0)),
        )


def candidates(device: str, supported: Sequence[str] | set[str]) -> list[str]:
    """The compute types worth timing on ``device``, those CTranslate2 supports there."""
    return [c for c in CANDIDATES.get(device, ("float32",)) if c in supported]


def choose_compute_type(
    types: Sequence[str],
    load: Callable[[str], EngineProbe],
    *,
    shape: tuple[int, int],
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> ComputeTypeChoice:
    """Time each compute type at ``shape``; keep the fastest.

    All candidates are loaded and warmed up (one untimed call each), then
    called in turns — one call each per round, at least two rounds, until
    each has run ``min_seconds`` — so a burst of load from other processes
    hits them alike; each is judged by its fastest call. Throughput counts
    padded tokens (``n * max_len``) per second; ties go to the earlier type.
    """
    if not types:
        raise ValueError("no compute type to choose from")
    n, max_len = shape
    probes = {ctype: load(ctype) for ctype in types}
    for probe in probes.values():
        probe.run(n, max_len)  # warm-up
    best = dict.fromkeys(types, float("inf"))
    spent = dict.fromkeys(types, 0.0)
    rounds = 0
    while rounds < 2 or min(spent.values()) < min_seconds:
        for ctype, probe in probes.items():
            began = clock()
            probe.run(n, max_len)
            took = clock() - began
            best[ctype] = min(best[ctype], took)
            spent[ctype] += took
        rounds += 1
    speeds = {c: n * max_len / t if t > 0 else float("inf") for c, t in best.items()}
    chosen = max(types, key=lambda c: (speeds[c], -types.index(c)))
    return ComputeTypeChoice(chosen, {c: round(s, 1) for c, s in speeds.items()})


def measure_profile(
    requested: str,
    types: Sequence[str],
    load: Callable[[str], EngineProbe],
    *,
    shape: tuple[int, int],
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> EngineProfile:
    """Choose the compute type (when ``requested`` is ``auto``) and fit its cost model."""
    if requested == "auto":
        choice = choose_compute_type(types, load, shape=shape, min_seconds=min_seconds, clock=clock)
        chosen, speeds = choice.compute_type, choice.tokens_per_s
    else:
        chosen, speeds = requested, {}
    probe = load(chosen)
    calibration = calibrate(probe.run, clock=clock)
    return EngineProfile(
        chosen, calibration.cost, speeds, calibration.timings, measured_at=time.time()
    )


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows."""
    fallback = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return fallback


def machine_key(device: str, inter_threads: int, intra_threads: int) -> str:
    """What makes timings comparable: CPU model, core count, device, threads, CTranslate2."""
    import ctranslate2

    return (
        f"{cpu_model()}|cpus={os.cpu_count()}|{device}|threads={inter_threads}x{intra_threads}"
        f"|ct2={ctranslate2.__version__}"
    )


class ProfileCache:
    """Profiles by key in one JSON file (written atomically; unreadable files are ignored)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> EngineProfile | None:
        raw = self._read().get(key)
        if raw is None:
            return None
        try:
            return EngineProfile.from_json(raw)
        except (KeyError, TypeError, ValueError):
            log.warning("ignoring a malformed engine profile for %s in %s", key, self.path)
            return None

    def get_json(self, key: str) -> dict[str, Any] | None:
        """Another measurement kept under ``key`` (a GPU's replica plan), as stored."""
        raw = self._read().get(key)
        return raw if isinstance(raw, dict) else None

    def put(self, key: str, profile: EngineProfile) -> None:
        self.put_json(key, profile.to_json())

    def put_json(self, key: str, value: dict[str, Any]) -> None:
        data = self._read()
        data[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
        tmp.replace(self.path)


def fitting_profile(
    cache: ProfileCache, key: str, measure: Callable[[], EngineProfile], *, name: str
) -> EngineProfile:
    """The profile cached under ``key`` if its cost model explains its timings, else ``measure()``.

    Only a measurement that fits is cached: one taken on a busy machine is used for this
    run and measured again at the next start, rather than kept for every start after.
    """
    profile = cache.get(key)
    if profile is not None and profile.fits:
        return profile
    if profile is not None:
        log.info(
            "%s: the cached call-cost model is %.0f%% off its timings; measuring again",
            name,
            100 * profile.fit_error,
        )
    profile = measure()
    if profile.fits:
        cache.put(key, profile)
    else:
        log.warning(
            "%s: the call-cost model is %.0f%% off its timings (the machine was busy "
            "while they were measured); using it for this run, measuring again at the "
            "next start",
            name,
            100 * profile.fit_error,
        )
    return profile
