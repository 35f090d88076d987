"""The pure parts of the chaos drills: texts, group assignments, SLA windows, verdicts, CLI."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka.partitioner.default import DefaultPartitioner

from pipeline.cli.main import main
from pipeline.contract.messages import SlaWindow, TranslationResult
from pipeline.contract.pairs import Pair
from pipeline.drill.context import (
    assignment_of,
    busiest_leader,
    holds,
    ingress_partition,
    settled,
)
from pipeline.drill.network import drop_rules
from pipeline.drill.reconcile import reconcile
from pipeline.drill.scenarios import (
    SCENARIOS,
    Scenario,
    _problems,
    evicted_replays,
    first_result_after,
    kill_all_workers,
    repeating_text,
)
from pipeline.drill.sla_job import check_windows

W = 5_000  # window (ms)


def test_every_fifth_text_repeats_one_sent_lag_requests_earlier() -> None:
    text = repeating_text(every=5, lag=100)
    texts = [text("m", i) for i in range(1000)]
    assert texts[4] == "Drill m request 4."  # too early to repeat
    assert texts[104] == texts[4] and texts[204] == texts[4]  # a repeat of a repeat: same text
    assert texts[103] == "Drill m request 103."
    repeats = [i for i in range(1000) if texts[i] in texts[:i]]
    assert repeats == [i for i in range(100, 1000) if i % 5 == 4]
    assert repeating_text(every=0, lag=100)("m", 104) == "Drill m request 104."


def test_first_result_after_the_fault_counts_only_requests_sent_after_it() -> None:
    sent = {"a": 900, "b": 1000, "c": 1500}
    seen = {"a": 1100, "b": 4000, "c": 2600}
    assert first_result_after(1000, sent, seen) == 1600  # c's result, not a's
    assert first_result_after(2000, sent, seen) is None


def test_assignments_settle_when_every_partition_has_one_owner() -> None:
    ready = {"ready": True, "assigned": {"t": [0, 1], "u": [0]}}
    assert assignment_of(ready) == {"t": {0, 1}, "u": {0}}
    assert assignment_of({"ready": False, "reason": "rebalancing"}) == {}
    assert assignment_of(None) == {}
    counts = {"t": 3, "u": 1}
    assert settled([{"t": {0, 1}, "u": {0}}, {"t": {2}}], counts)
    assert not settled([{"t": {0, 1}, "u": {0}}, {"t": {1, 2}}], counts)  # 1 twice
    assert not settled([{"t": {0, 1}, "u": {0}}], counts)  # 2 nobody's
    assert holds({"t": {0, 1, 2}}, {"t": {1, 2}})
    assert not holds({"t": {0, 1}}, {"t": {1, 2}})
    assert holds({"t": {0}}, {})


def test_busiest_leader_is_the_node_leading_most_partitions() -> None:
    parts = [{"leader_id": n} for n in (2, 3, 2, 1, -1)]
    assert busiest_leader(parts) == 2
    assert busiest_leader([{"leader_id": 3}, {"leader_id": 1}]) == 1  # a tie: the lower id


def test_ingress_partition_matches_the_producers_partitioner() -> None:
    class Cluster:
        def topics(self) -> set[str]:
            return {"t"}

        def partitions_for_topic(self, _topic: str) -> set[int]:
            return set(range(6))

        def available_partitions_for_topic(self, _topic: str) -> set[int]:
            return set(range(6))

    for pair in (Pair("en", "en-XA"), Pair("en-XA", "en"), Pair("en", "de")):
        key = pair.id.encode()
        expected = DefaultPartitioner().partition("t", key, key, None, None, Cluster())
        assert ingress_partition(pair, 6) == expected


def test_drop_rules_name_the_group_and_each_broker_port() -> None:
    assert drop_rules(995, [19792, 19802]) == [
        [
            "OUTPUT",
            "-m",
            "owner",
            "--gid-owner",
            "995",
            "-p",
            "tcp",
            "--dport",
            "19792",
            "-j",
            "DROP",
        ],
        [
            "OUTPUT",
            "-m",
            "owner",
            "--gid-owner",
            "995",
            "-p",
            "tcp",
            "--dport",
            "19802",
            "-j",
            "DROP",
        ],
    ]


def _window(start: int, count: int, duplicates: int = 0) -> SlaWindow:
    return SlaWindow(
        pair="en_en-XA",
        window_start=start,
        window_end=start + W,
        count=count,
        duplicates=duplicates,
        p50_ms=1,
        p95_ms=1,
        p99_ms=1,
        timeout_ratio=0,
        error_ratio=0,
        cache_hit_ratio=0,
    )


def test_closed_windows_must_each_be_emitted_once_with_their_count() -> None:
    base = 1_700_000_000_000  # a multiple of W
    completed = [base + 1000, base + 2000, base + W + 10, base + 2 * W + 10, base + 4 * W + 500]
    # newest 4W+500, lateness W: windows ending by 3W+500 are closed (0, W, 2W), not 4W
    windows = [
        _window(base, 2),
        _window(base + W, 1),
        _window(base + W, 1),
        _window(base - W, 7),
    ]  # before the traffic: ignored
    check = check_windows(windows, completed, since_ms=base - 200, window_ms=W, watermark_ms=W)
    assert check.expected == 3
    assert check.missing == [base + 2 * W]
    assert check.emitted_twice == [base + W]
    assert check.wrong_counts == {}
    assert len(check.problems()) == 2

    short = check_windows(
        [_window(base, 1), _window(base + W, 1), _window(base + 2 * W, 1)],
        completed,
        since_ms=base,
        window_ms=W,
        watermark_ms=W,
    )
    assert short.missing == [] and short.emitted_twice == []
    assert short.wrong_counts == {base: (1, 2)}
    assert short.problems() == [
        f"1 SLA windows with a wrong count (start: (written, seen)) {{{base}: (1, 2)}}"
    ]
    # a result counted once and its copy as a duplicate: every result accounted for
    deduplicated = check_windows(
        [_window(base, 1, duplicates=1), _window(base + W, 1), _window(base + 2 * W, 1)],
        completed,
        since_ms=base,
        window_ms=W,
        watermark_ms=W,
    )
    assert deduplicated.problems() == []


def test_windows_before_the_first_whole_window_of_traffic_are_not_expected() -> None:
    base = 1_700_000_000_000
    # traffic began at base + 3 s: the window at base is partial, so not compared
    completed = [base + 4000, base + W + 1, base + 3 * W]
    check = check_windows(
        [_window(base + W, 1)], completed, since_ms=base + 3000, window_ms=W, watermark_ms=0
    )
    assert (check.expected, check.missing, check.emitted_twice, check.wrong_counts) == (
        1,
        [],
        [],
        {},
    )


def _result(
    rid: str, status: str = "ok", worker: str | None = None, completed_at: int = 2
) -> TranslationResult:
    return TranslationResult(
        request_id=rid,
        source_lang="en",
        target_lang="en-XA",
        pair="en_en-XA",
        status=status,
        submitted_at=1,
        completed_at=completed_at,
        latency_ms=1,
        worker=worker,
    )


def test_evicted_replays_are_late_copies_of_another_workers_results() -> None:
    results = {
        "a": [
            _result("a", worker="w1", completed_at=10),
            _result("a", worker="w2", completed_at=30),
        ],
        "b": [
            _result("b", worker="w1", completed_at=10),
            _result("b", worker="w2", completed_at=15),
        ],
        "c": [
            _result("c", worker="w2", completed_at=10),
            _result("c", worker="w2", completed_at=40),
        ],
        "d": [_result("d", worker="w2", completed_at=25)],
        "e": [
            _result("e", worker="w2", completed_at=5),
            _result("e", worker="w1", completed_at=30),
        ],
    }
    # a: a replay after the heal (20); b: before it; c: its own repeat; d: no copy; e: by w1
    assert evicted_replays(results, "w2", since_ms=20) == 1
    assert evicted_replays(results, "w1", since_ms=20) == 1


def test_problems_name_every_broken_guarantee() -> None:
    acked = {"a": 1, "b": 1, "c": 1}
    results = {"a": [_result("a"), _result("a")], "b": [_result("b", "error")]}
    report = reconcile(acked, results)
    strict = Scenario("s", "", kill_all_workers, no_duplicates=True, repeats_must_hit=True)
    found = _problems(strict, report, {"t": 3}, {"miss": 2, "window": 5}, rebalanced=False)
    assert found == [
        "1 acknowledged requests got no result (first: ['c'])",
        "1 error results",
        "results other than ok: {'ok': 1, 'error': 1}",
        "1 duplicate results where at-least-once gives none",
        "commits did not reach the log end: {'t': 3}",
        "2 repeats after the heal were translated again (cache levels {'miss': 2, 'window': 5})",
    ]
    lenient = Scenario("s", "", kill_all_workers)
    clean = reconcile({"a": 1}, {"a": [_result("a"), _result("a")]})
    assert _problems(lenient, clean, {"t": 0}, {"miss": 1}, rebalanced=False) == []


def test_a_rebalance_lets_a_strict_scenario_answer_twice() -> None:
    """Batches in flight at a rebalance are read again by design; nothing else is excused."""
    strict = Scenario("s", "", kill_all_workers, no_duplicates=True)
    twice = reconcile({"a": 1}, {"a": [_result("a"), _result("a")]})
    assert _problems(strict, twice, {"t": 0}, {}, rebalanced=True) == []
    assert _problems(strict, twice, {"t": 2}, {}, rebalanced=True) == [
        "commits did not reach the log end: {'t': 2}"
    ]


def test_drill_list_names_every_scenario() -> None:
    out = CliRunner().invoke(main, ["drill", "list"])
    assert out.exit_code == 0
    assert [line.split()[0] for line in out.output.splitlines()] == list(SCENARIOS)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_drill_without_a_stack_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    monkeypatch.setenv("BABELSTREAM_STACK__HOME", str(tmp_path))
    monkeypatch.setenv("BABELSTREAM_STACK__KAFKA_PORT", str(port))
    monkeypatch.setenv("BABELSTREAM_STACK__REDIS_PORT", str(_closed_port()))
    monkeypatch.setenv("BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    out = CliRunner().invoke(main, ["drill", "redis-down", "--json"])
    assert out.exit_code == 1, out.output
    assert out.output.count("\n") == 1
    assert out.output == (
        f"Error: the stack under {tmp_path} is not running (kafka, redis down): start it "
        "with `babelstream up --brokers 3` (and source its settings.env)\n"
    )


def test_reconcile_says_who_wrote_the_duplicates() -> None:
    results = {
        "a": [_result("a", worker="w1", completed_at=5), _result("a", worker="w2", completed_at=9)],
        "b": [_result("b", worker="w1")] * 3,
        "c": [_result("c", worker="w1")],
    }
    report = reconcile({"a": 1, "b": 1, "c": 1}, results, fault_window_ms=(50, 60))
    assert report.duplicates == 3
    assert report.duplicate_copies == {2: 1, 3: 1}
    assert report.duplicates_by_worker == {"w2": 1, "w1": 2}
    assert report.duplicate_samples["a"] == [("w1", 5, "None"), ("w2", 9, "None")]
    assert report.p99_during_fault_ms is None  # nothing was sent during that window
