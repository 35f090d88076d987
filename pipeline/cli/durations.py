"""Durations and points in time as people write them: one parser for every command.

A *duration* is a bare number of seconds (``30``, ``0.5``) or numbers with
units (``500ms``, ``10s``, ``5m``, ``2h``, ``1d``, also ``1h30m`` or
``5 min``), read by pytimeparse2. A *time* is ``now``, ``now-<duration>``,
an ISO 8601 time (UTC unless it says otherwise), epoch milliseconds (a
number of 11 digits or more: no one means a duration of 3,000 years), or a
duration back from now (``2h``, ``90``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from pytimeparse2 import parse as _timeparse

from pipeline.errors import ConfigError

DURATION_FORMS = "seconds (30) or a number with a unit: 500ms, 10s, 5m, 2h, 1d"
TIME_FORMS = "ISO 8601, epoch ms, now-<duration> or a duration back from now (2h)"
# the smallest bare number read as epoch milliseconds (1973-03-03) rather than seconds
_EPOCH_MS_FROM = 10**11


def parse_duration(text: str) -> float:
    """Seconds in ``text``; :class:`ConfigError` for anything else, or a negative duration."""
    seconds = _timeparse(text.strip()) if text.strip() else None
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ConfigError(f"{text!r} is not a duration: give {DURATION_FORMS}")
    if seconds < 0:
        raise ConfigError(f"{text!r} is negative: give {DURATION_FORMS}")
    return float(seconds)


def parse_instant(text: str, now: int) -> int:
    """Epoch ms of the time ``text`` (see the module docstring), relative to ``now``."""
    text = text.strip()
    if text == "now":
        return now
    if text.startswith("now-"):
        return now - round(parse_duration(text[4:]) * 1000)
    if text.isdigit() and int(text) >= _EPOCH_MS_FROM:
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            return now - round(parse_duration(text) * 1000)
        except ConfigError:
            raise ConfigError(f"{text!r} is not a time: give {TIME_FORMS}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def utc_iso(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time, to the second."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
