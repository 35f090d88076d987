"""The SLA dashboard in real headless Chromium, fed by SlaWindow records on real Kafka.

``babelstream dashboard`` runs as a subprocess on test-unique SLA and late
topics; Debian's Chromium loads it, driven by Playwright (``executable_path``:
no browser is downloaded). Assertions
are on what the page charts (Chart.js datasets and their rendered points) and
on the table rendered alongside; a screenshot is kept under ``artifacts/``.
Without a browser: the first paint (server-rendered HTML) shows the windows
the server has, a client that closes its event stream leaves no ERROR in
the log, and the server listens on loopback only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from kafka import KafkaProducer
from playwright.sync_api import Page

from pipeline.contract.messages import LateResult, SlaWindow
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.sla.logic import JobRun
from tests.browser import browser_page

pytestmark = pytest.mark.integration

ARTIFACTS = PROJECT_ROOT / "artifacts"
T0 = 1_700_000_000_000 - 1_700_000_000_000 % 10_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def window(
    pair: str,
    index: int,
    *,
    count: int,
    p95: float,
    p99: float,
    timeouts: float = 0.0,
    hits: float = 0.5,
    length_ms: int = 10_000,
) -> SlaWindow:
    start = T0 + index * length_ms
    return SlaWindow(
        pair=pair,
        window_start=start,
        window_end=start + length_ms,
        count=count,
        p50_ms=p95 / 2,
        p95_ms=p95,
        p99_ms=p99,
        timeout_ratio=timeouts,
        error_ratio=0.0,
        cache_hit_ratio=hits,
        objectives={"timeout_ratio": 0.01},
        met={"timeout_ratio": timeouts <= 0.01},
        burn_rate_1h=timeouts / 0.01,
        burn_rate_6h=timeouts / 0.02,
    )


def health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
        return json.load(response)


@pytest.fixture
def sla_topic(new_topic: Callable[..., str]) -> str:
    return new_topic(partitions=2)


@pytest.fixture
def late_topic(new_topic: Callable[..., str]) -> str:
    return new_topic(partitions=1)


@pytest.fixture
def dashboard_log(tmp_path: Path) -> Path:
    return tmp_path / "dashboard.log"


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """The SLA job's checkpoint folder as the dashboard sees it (the job's last run record)."""
    return tmp_path / "sla-checkpoint"


@pytest.fixture
def dashboard_proc(
    sla_topic: str, late_topic: str, stack: object, dashboard_log: Path, checkpoint: Path
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    log_path = dashboard_log
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline",
                "-vv",
                "dashboard",
                "--port",
                str(port),
                "--topic",
                sla_topic,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **os.environ,
                "BABELSTREAM_SLA__LATE_TOPIC": late_topic,
                "BABELSTREAM_SLA__CHECKPOINT_DIR": str(checkpoint),
            },
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"dashboard exited; see {log_path}"
            try:
                if health(port)["following"]:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"dashboard not ready; see {log_path}"
            time.sleep(0.2)
        yield port, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def dashboard(dashboard_proc: tuple[int, subprocess.Popen[bytes]]) -> int:
    return dashboard_proc[0]


@pytest.fixture
def page() -> Iterator[Page]:
    """A page of Debian's chromium, driven by Playwright; tall enough for both pairs'
    charts and tables in one screenshot."""
    with browser_page() as page:
        yield page


def produce(settings: Settings, topic: str, records: list[SlaWindow | LateResult | bytes]) -> None:
    producer = KafkaProducer(**kafka_python_options(settings.kafka, "tests"), acks="all")
    for record in records:
        if isinstance(record, SlaWindow | LateResult):
            producer.send(topic, key=record.pair.encode(), value=record.to_json())
        else:
            producer.send(topic, key=b"junk", value=record)
    producer.flush(30)
    producer.close()


CHART_DATA = """(() => {
  const out = {};
  for (const [pair, charts] of Object.entries(window.babelstream.charts)) {
    out[pair] = {};
    for (const [name, chart] of Object.entries(charts)) {
      out[pair][name] = chart.data.datasets.map((d, i) => ({
        label: d.label,
        x: d.data.map((p) => p.x),
        y: d.data.map((p) => p.y),
        rendered: chart.getDatasetMeta(i).data.length,
      }));
    }
  }
  return out;
})()"""

TABLE_ROWS = """(() => [...document.querySelectorAll('section.pair')].map((s) => ({
  pair: s.dataset.pair,
  rows: [...s.querySelectorAll('tbody tr')].map((r) => ({
    count: Number(r.dataset.count), p95: Number(r.dataset.p95), p99: Number(r.dataset.p99),
    cells: [...r.cells].map((c) => c.textContent),
  })),
})))()"""


def test_dashboard_charts_sla_windows(dashboard: int, sla_topic: str, page: Page) -> None:
    settings = load_settings()
    # produced before the page opens: the server replays them in its snapshot
    early = [
        window("en_en-XA", 0, count=40, p95=120, p99=180),
        window("en_en-XA", 1, count=55, p95=140, p99=260, timeouts=0.02, hits=0.6),
    ]
    produce(settings, sla_topic, list(early))
    deadline = time.monotonic() + 30
    while health(dashboard)["records"] < 2:
        assert time.monotonic() < deadline, health(dashboard)
        time.sleep(0.2)

    page.goto(f"http://127.0.0.1:{dashboard}/")
    page.wait_for_function("document.getElementById('status').dataset.state === 'live'")
    assert page.evaluate("typeof Chart") == "function"  # served, not a CDN
    page.wait_for_function("document.body.dataset.windowCount === '2'")
    # live: new windows, a second pair, a re-emitted window, and junk
    live = [
        window("en_en-XA", 2, count=61, p95=150, p99=300, timeouts=0.05, hits=0.7),
        window("en-XA_en", 0, count=12, p95=90, p99=95, hits=0.25),
        window("en-XA_en", 1, count=18, p95=100, p99=130, hits=0.5),
        window("en_en-XA", 1, count=57, p95=145, p99=270, timeouts=0.02, hits=0.6),
        b"not a window",
    ]
    produce(settings, sla_topic, live)
    page.wait_for_function(
        "document.body.dataset.windowCount === '5'"
        " && document.body.dataset.pairCount === '2'"
        " && document.querySelector('#pair-en_en-XA tbody tr').dataset.count === '61'"
        " && window.babelstream.charts['en_en-XA'].latency.data.datasets[0]"
        ".data[1]?.y === 145"
    )
    page.wait_for_timeout(300)  # let the last frame paint before the screenshot
    page.screenshot(path=ARTIFACTS / "dashboard.png")
    assert page.evaluate("document.getElementById('status').textContent") == "live"
    charts = page.evaluate(CHART_DATA)
    tables = page.evaluate(TABLE_ROWS)

    enxa = charts["en_en-XA"]
    latency = {d["label"]: d for d in enxa["latency"]}
    assert latency["P95 · 10 s"]["y"] == [120, 145, 150]  # the re-emitted window replaced 140
    assert latency["P99 · 10 s"]["y"] == [180, 270, 300]
    assert enxa["throughput"][0]["y"] == [40, 57, 61]
    assert enxa["timeouts"][0]["y"] == [0.0, 0.02, 0.05]
    assert enxa["cache"][0]["y"] == [0.5, 0.6, 0.7]
    assert {d["label"]: d["y"] for d in enxa["burn"]} == {
        "1 h · 10 s": [0.0, 2.0, 5.0],
        "6 h · 10 s": [0.0, 1.0, 2.5],
    }
    for datasets in enxa.values():
        for dataset in datasets:
            assert dataset["rendered"] == 3  # Chart.js drew a point per window
    xaen = charts["en-XA_en"]
    assert xaen["throughput"][0]["y"] == [12, 18]
    assert {d["label"]: d["y"] for d in xaen["latency"]} == {
        "P95 · 10 s": [90, 100],
        "P99 · 10 s": [95, 130],
    }

    by_pair = {t["pair"]: t["rows"] for t in tables}
    assert [t["pair"] for t in tables] == ["en-XA_en", "en_en-XA"]
    assert [r["count"] for r in by_pair["en_en-XA"]] == [61, 57, 40]  # newest first
    assert by_pair["en_en-XA"][0]["cells"][1:3] == ["10 s", "61"]
    assert by_pair["en_en-XA"][0]["cells"][6] == "5.0%"
    assert health(dashboard)["skipped"] == 1
    screenshot = ARTIFACTS / "dashboard.png"
    assert screenshot.stat().st_size > 10_000
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_windows_out_of_order_gapped_and_of_two_sizes_chart_in_order(
    dashboard: int, sla_topic: str, page: Page
) -> None:
    """Records arrive out of order, with a half-hour gap, from runs of the job with 10 s and
    5 s windows: one line per figure and window size, in window order, broken at the gap."""
    settings = load_settings()
    ten = [window("en_en-XA", i, count=10 + i, p95=100 + i, p99=200 + i) for i in (3, 0, 2, 1)]
    gap = window("en_en-XA", 180, count=99, p95=190, p99=290)  # 30 minutes after the rest
    five = [window("en_en-XA", i, count=i, p95=50 + i, p99=60 + i, length_ms=5_000) for i in (1, 0)]
    produce(settings, sla_topic, [ten[0], five[0], ten[1], gap, ten[2], five[1], ten[3]])
    wait_for_records(dashboard, 7)

    with urllib.request.urlopen(f"http://127.0.0.1:{dashboard}/api/windows", timeout=5) as r:
        api = json.load(r)
    by_size: dict[int, list[int]] = {}
    for w in api:
        by_size.setdefault(w["window_end"] - w["window_start"], []).append(w["window_end"])
    assert by_size == {
        5_000: [T0 + 5_000, T0 + 10_000],
        10_000: [T0 + 10_000, T0 + 20_000, T0 + 30_000, T0 + 40_000, T0 + 1_810_000],
    }, "one series per window size, each in window order, no end twice"

    page.goto(f"http://127.0.0.1:{dashboard}/")
    page.wait_for_function("document.body.dataset.windowCount === '7'")
    page.wait_for_timeout(300)  # let the last frame paint before the screenshot
    page.screenshot(path=ARTIFACTS / "dashboard-gaps.png")
    charts = page.evaluate(CHART_DATA)["en_en-XA"]
    latency = {d["label"]: d for d in charts["latency"]}
    assert list(latency) == ["P95 · 5 s", "P99 · 5 s", "P95 · 10 s", "P99 · 10 s"]
    p95 = latency["P95 · 10 s"]
    assert p95["y"] == [100, 101, 102, 103, None, 190], "in order, broken at the gap"
    assert p95["x"] == sorted(p95["x"]) and p95["x"][4] == T0 + 50_000
    assert latency["P95 · 5 s"]["y"] == [50, 51]
    throughput = {d["label"]: d["y"] for d in charts["throughput"]}
    assert throughput == {"count · 5 s": [0, 1], "count · 10 s": [10, 11, 12, 13, None, 99]}
    assert p95["rendered"] == 6


def test_an_empty_dashboard_says_why(dashboard: int, sla_topic: str, checkpoint: Path) -> None:
    """After a run of the SLA job with the console sink alone, the page says that is why."""
    assert "No SLA windows on" in (health(dashboard)["empty_reason"] or "")
    JobRun(("console",), "translate.sla", 1_700_000_000_000).write(checkpoint)
    with urllib.request.urlopen(f"http://127.0.0.1:{dashboard}/", timeout=5) as response:
        page = response.read().decode()
    empty = page.split('<p id="empty">', 1)[1].split("</p>", 1)[0]
    assert "with --sinks console, which writes no window to" in empty, empty
    assert "babelstream sla --sinks kafka,console" in empty, empty
    assert health(dashboard)["empty_reason"] == empty


def wait_for_records(port: int, records: int, late_records: int = 0) -> None:
    deadline = time.monotonic() + 30
    while True:
        state = health(port)
        if state["records"] >= records and state["late_records"] >= late_records:
            return
        assert time.monotonic() < deadline, state
        time.sleep(0.2)


def test_first_paint_shows_the_windows_the_server_has(
    dashboard: int, sla_topic: str, late_topic: str
) -> None:
    settings = load_settings()
    produce(
        settings,
        sla_topic,
        [
            window("en_en-XA", 0, count=40, p95=120, p99=180),
            window("en_en-XA", 1, count=55, p95=140, p99=260, timeouts=0.02),
        ],
    )
    produce(
        settings,
        late_topic,
        [
            LateResult(
                request_id=f"late-{i}",
                pair="en_en-XA",
                priority="interactive",
                status="ok",
                latency_ms=9,
                completed_at=T0 + 11_000,
                window_start=T0 + 10_000,
                window_end=T0 + 20_000,
                watermark=T0 + 40_000,
                late_by_ms=29_000,
            )
            for i in range(3)
        ],
    )
    wait_for_records(dashboard, 2, 3)
    with urllib.request.urlopen(f"http://127.0.0.1:{dashboard}/", timeout=5) as response:
        page = response.read().decode()
    assert 'id="empty"' not in page
    section = page.split('id="pair-en_en-XA"', 1)[1].split("</section>", 1)[0]
    rows = section.split("<tr data-window-start=")[1:]
    assert [row.split('data-count="')[1].split('"')[0] for row in rows] == ["55", "40"]
    assert "<td>3</td>" in rows[0], "late rows of the newest window"
    assert 'data-window-count="2"' in page


def test_a_closed_event_stream_is_no_error(
    dashboard_proc: tuple[int, subprocess.Popen[bytes]], sla_topic: str, dashboard_log: Path
) -> None:
    port, proc = dashboard_proc
    settings = load_settings()
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
            received = b""
            while b"event: snapshot" not in received:
                chunk = sock.recv(65536)
                assert chunk, f"stream ended before its snapshot: {received!r}"
                received += chunk
    # new windows make the server write to the closed streams
    produce(settings, sla_topic, [window("en_en-XA", i, count=1, p95=1, p99=1) for i in range(3)])
    wait_for_records(port, 3)
    deadline = time.monotonic() + 30
    while "closed by the client" not in (log := dashboard_log.read_text(errors="replace")):
        assert time.monotonic() < deadline, "the closes were seen (DEBUG)"
        time.sleep(0.2)
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
    listening = {
        c.laddr.ip
        for c in psutil.Process(proc.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}, listening
