"""One parser for every duration and time a command takes (pipeline/cli/durations.py)."""

from __future__ import annotations

import pytest

from pipeline.cli.durations import parse_duration, parse_instant
from pipeline.errors import ConfigError

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("0.5", 0.5),
        ("0", 0.0),
        ("5s", 5.0),
        (" 10 s ", 10.0),
        ("500ms", 0.5),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("30d", 2_592_000.0),
        ("1h30m", 5400.0),
        ("5 min", 300.0),
    ],
)
def test_bare_numbers_are_seconds_and_units_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "five", "10x", "nan", "inf", "yesterday"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ConfigError, match=r"is not a duration: give seconds \(30\) or a number"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["-1", "-5s", "- 1 minute"])
def test_a_negative_duration_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="is negative"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now-30d", NOW - 30 * 86_400_000),
        ("now-2h", NOW - 7_200_000),
        ("now-90", NOW - 90_000),
        ("15m", NOW - 15 * 60_000),
        ("1d", NOW - 86_400_000),
        ("90", NOW - 90_000),  # a bare number is seconds back, like every duration
        ("1700000000000", 1_700_000_000_000),  # 11 digits or more: epoch ms
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
    ],
)
def test_times(text: str, expected: int) -> None:
    assert parse_instant(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "now-soon", "2023-13-01"])
def test_what_is_not_a_time(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a"):
        parse_instant(text, NOW)
