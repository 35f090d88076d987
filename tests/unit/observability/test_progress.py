"""Progress off a terminal: plain lines (counts, rate, ETA), no carriage returns or escapes."""

from __future__ import annotations

import io

import pytest

from pipeline.observability import progress
from pipeline.observability.progress import progress_bar


class FakeStderr(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_lines_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = FakeStderr(tty=False)
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)
    with (
        progress_bar("completed", total=4, unit="seg", position=1) as first,
        progress_bar("submitted", total=4, unit="seg", position=0),
    ):
        for _ in range(4):
            first.update()
    text = err.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].startswith("completed: 0/4 (0%)")
    assert any(
        line.startswith("completed: 2/4 (50%)") and "seg/s" in line and "ETA" in line
        for line in lines
    )
    # each bar's last state when it closes (the inner one first)
    assert lines[-2].startswith("submitted: 0/4 (0%)")
    assert lines[-1].startswith("completed: 4/4 (100%)")


def test_unknown_total_has_no_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    err = FakeStderr(tty=False)
    monkeypatch.setattr("sys.stderr", err)
    with progress_bar("results") as bar:
        bar.update(3)
    assert err.getvalue().splitlines()[-1].startswith("results: 3, ")


def test_lines_are_rate_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    err = FakeStderr(tty=False)
    monkeypatch.setattr("sys.stderr", err)
    with progress_bar("results", total=10_000) as bar:
        for _ in range(10_000):
            bar.update()
    assert len(err.getvalue().splitlines()) <= 3  # first, maybe one, last: not 10,000


def test_disabled_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    err = FakeStderr(tty=False)
    monkeypatch.setattr("sys.stderr", err)
    with progress_bar("results", total=3, enabled=False) as bar:
        bar.update(3)
    assert err.getvalue() == ""
