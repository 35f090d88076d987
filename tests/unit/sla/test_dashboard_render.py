"""The dashboard's window store and its server-side first paint, without Kafka or a browser."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from pipeline.contract.messages import LateResult, SlaWindow
from pipeline.settings import SlaSettings
from pipeline.sla.dashboard.server import STATIC_DIR, WindowStore, empty_reason, render_index
from pipeline.sla.logic import JobRun

T0 = 1_700_000_000_000


def window(pair: str, index: int, count: int, priority: str = "interactive") -> SlaWindow:
    return SlaWindow(
        pair=pair,
        priority=priority,
        window_start=T0 + index * 5000,  # type: ignore[arg-type]
        window_end=T0 + (index + 1) * 5000,
        count=count,
        p50_ms=10.0,
        p95_ms=20.0,
        p99_ms=30.0,
        timeout_ratio=0.25,
        error_ratio=0.0,
        cache_hit_ratio=0.5,
        duplicates=2,
        met={"p95_ms": True, "timeout_ratio": False},
    )


def late(request_id: str, index: int) -> LateResult:
    return LateResult(
        request_id=request_id,
        pair="en_de",
        priority="interactive",
        status="ok",
        latency_ms=5,
        completed_at=T0 + index * 5000 + 1,
        window_start=T0 + index * 5000,
        window_end=T0 + (index + 1) * 5000,
        watermark=T0 + 60_000,
        late_by_ms=59_999,
    )


def template() -> str:
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


def test_empty_store_says_why() -> None:
    page = render_index(WindowStore(10), template(), "No SLA windows: <em>why</em>")
    assert '<p id="empty">No SLA windows: <em>why</em></p>' in page
    assert 'data-window-count="0"' in page
    state = re.search(r'<script id="initial-state" type="application/json">(.*?)</script>', page)
    assert state is not None and json.loads(state[1]) == {"windows": [], "late": []}


def test_first_paint_shows_the_windows_the_server_has() -> None:
    store = WindowStore(10)
    for w in (
        window("en_de", 0, 40),
        window("en_de", 1, 55),
        window("de_en", 0, 7),
        window("en_de", 0, 9, priority="bulk"),
    ):
        store.add(w)
    store.add_late(late("a", 1))
    store.add_late(late("a", 1))  # the same record again: counted once
    store.add_late(late("b", 1))
    page = render_index(store, template(), "unused")
    assert 'id="empty"' not in page
    assert 'data-window-count="4" data-pair-count="2"' in page
    rows = re.findall(r'<section class="pair" id="([^"]+)"[^>]*>.*?</section>', page)
    assert rows == ["pair-de_en", "bulk-en_de", "pair-en_de"]
    en_de = re.search(r'<section class="pair" id="pair-en_de".*?</section>', page)
    assert en_de is not None
    cells = re.findall(r"<tr data-window-start=\"(\d+)\" data-count=\"(\d+)\".*?</tr>", en_de[0])
    assert cells == [(str(T0 + 5000), "55"), (str(T0), "40")], "newest first"
    first_row = re.search(r"<tr [^>]*>(.*?)</tr>", en_de[0])
    assert first_row is not None
    assert re.findall(r"<td>(.*?)</td>", first_row[1])[1:] == [
        "5 s",
        "55",
        "10",
        "20",
        "30",
        "25.0%",
        "0.0%",
        "50.0%",
        "2",
        "2",
        "timeout_ratio",
        "final",
    ]
    assert re.search(r'id="bulk-en_de"[^>]*hidden', page), "bulk hidden by default"
    assert "</script>" not in page.split('type="application/json">')[1].split("</script>")[0]


def test_subscribers_get_windows_and_late_counts() -> None:
    async def scenario() -> list[tuple[str, dict]]:
        store = WindowStore(2)
        with store.subscribe() as queue:
            for i in range(3):
                store.add(window("en_de", i, 10 + i))
            store.add_late(late("x", 2))
            received = [queue.get_nowait() for _ in range(queue.qsize())]
        assert [w["count"] for w in store.snapshot()] == [11, 12], "bounded per series"
        return received

    received = asyncio.run(scenario())
    assert [event for event, _ in received] == ["window"] * 3 + ["late"]
    assert received[-1][1] == {
        "pair": "en_de",
        "priority": "interactive",
        "window_start": T0 + 10_000,
        "window_end": T0 + 15_000,
        "late": 1,
    }


def spanning(start_s: int, length_s: int, count: int) -> SlaWindow:
    start = T0 + start_s * 1000
    return window("en_de", 0, count).model_copy(
        update={"window_start": start, "window_end": start + length_s * 1000}
    )


def test_windows_of_other_definitions_and_out_of_order_are_series_apart_and_sorted() -> None:
    """Runs of the job with other window sizes write to one topic, and records come in any
    order: one series per pair, priority and window length, each in window order."""
    store = WindowStore(100)
    for w in (
        spanning(15, 5, 4),
        spanning(0, 5, 1),
        spanning(10, 10, 20),  # ends with the 5 s window at 15-20
        spanning(10, 5, 3),
        spanning(0, 10, 10),  # starts with the 5 s window at 0-5
        spanning(1800, 5, 9),  # after a half-hour gap
        spanning(5, 5, 2),
    ):
        store.add(w)
    snapshot = store.snapshot()
    series = [(w["window_end"] - w["window_start"], w["count"]) for w in snapshot]
    assert series == [
        (5000, 1),
        (5000, 2),
        (5000, 3),
        (5000, 4),
        (5000, 9),
        (10000, 10),
        (10000, 20),
    ]
    for length in (5000, 10000):
        ends = [w["window_end"] for w in snapshot if w["window_end"] - w["window_start"] == length]
        assert ends == sorted(set(ends)), "in order, no end twice"
    page = render_index(store, template(), "unused")
    rows = re.findall(r"<tr data-window-start=\"(\d+)\" data-count=\"(\d+)\"", page)
    assert [int(count) for _, count in rows] == [9, 20, 4, 3, 10, 2, 1], "newest end first"


def test_the_empty_page_says_why(tmp_path: Path) -> None:
    sla = SlaSettings(checkpoint_dir=tmp_path / "ck")
    topic = "translate.sla"
    assert "translate.sla does not exist yet" in empty_reason(topic, False, sla, 3600)
    assert "in the last 60 min" in empty_reason(topic, True, sla, 3600)
    JobRun(("console",), topic, T0).write(sla.checkpoint_dir)
    console = empty_reason(topic, True, sla, 3600)
    assert "with --sinks console, which writes no window to translate.sla" in console
    assert "babelstream sla --sinks kafka,console" in console
    JobRun(("kafka",), "my.sla", T0).write(sla.checkpoint_dir)
    assert "writing to my.sla. Start the dashboard with --topic my.sla" in empty_reason(
        topic, True, sla, 3600
    )
    JobRun(("kafka", "parquet"), topic, T0).write(sla.checkpoint_dir)
    assert "Is it running" in empty_reason(topic, True, sla, 600)
