"""The chaos suite: every scenario of ``pipeline/drill/scenarios.py`` on a 3-broker cluster.

One cluster (``babelstream up --brokers 3``'s own code: replication 3, min
ISR 2, a temporary home on free ports) and two workers in one group
(distinct instance ids) serve the whole module; each scenario heals what the
previous one broke before its traffic starts. Each sends paced traffic
(``drill.rate`` requests/s for ``drill.seconds``, unique ids, acks=all
idempotent producer), injects its fault after a third of it, heals it, sends
repeats, waits for the tail and reconciles by request id. Every acknowledged
request must have a result, none may be an ``error`` (or anything but
``ok``), commits must reach the log end; duplicates are counted and must be
zero only where at-least-once gives none. Every step is bounded
(``drill.*_timeout_s``): a stuck step fails with the step's name.

Each report is appended to ``var/chaos/report.jsonl`` (the table in
docs/operating/chaos.md comes from it). Run with ``make test-chaos`` (``pytest -m chaos``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pipeline.drill.context import DrillContext
from pipeline.drill.network import cut_unavailable
from pipeline.drill.scenarios import SCENARIOS, DrillReport, append_report, run_scenario
from pipeline.settings import Settings, load_settings
from pipeline.spark_connector import connector_jars
from tests.integration.stacks import running_stack

# a scenario's own bounds fail it first, with the step's name; this is the backstop
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DrillContext]:
    shared = load_settings()
    connector_jars(shared.kafka)  # fetched once, before any scenario's clock runs
    with running_stack(tmp_path_factory.mktemp("chaos"), brokers=3, secure=False) as stack:
        settings: Settings = stack.model_copy(update={"drill": shared.drill})
        ctx = DrillContext.open(
            settings,
            workers=2,
            home=shared.drill.home / "tests",
            isolate_last=cut_unavailable() is None,
        )
        try:
            yield ctx
        finally:
            ctx.close()


def drilled(ctx: DrillContext, name: str) -> DrillReport:
    """Run one scenario, record its report, and check what every scenario must hold.

    The scenario's own checks (``report.checks``) are asserted by its test.
    """
    scenario = SCENARIOS[name]
    report = run_scenario(ctx, scenario)
    append_report(ctx.drill.home / "report.jsonl", report)
    print(json.dumps(report.to_dict()))
    r, d = report.reconciliation, ctx.drill
    sent = round(d.rate * d.seconds * scenario.traffic_factor) + round(d.rate * d.after_heal_s)
    assert r.acked == sent, f"not every request was acknowledged ({report.failed_sends} failed)"
    assert r.missing == [], f"{len(r.missing)} acknowledged requests got no result"
    assert r.error_results == 0, "a fault became an error result"
    assert r.statuses == {"ok": r.answered}
    assert not any(report.final_lag.values()), f"commits stalled: {report.final_lag}"
    if scenario.no_duplicates and not report.rebalanced:
        assert r.duplicates == 0, "nobody lost uncommitted work, yet results came twice"
    if scenario.repeats_must_hit:
        assert sum(report.repeats.values()) > 0
        assert "miss" not in report.repeats, f"repeats translated again: {report.repeats}"
    return report


def test_cluster_is_replicated(drill: DrillContext) -> None:
    assert drill.stack.stack.brokers == 3
    assert (drill.kafka.replication_factor, drill.kafka.min_insync_replicas) == (3, 2)
    assert len(drill.workers) == 2
    assert len({w.instance_id for w in drill.workers}) == 2


def test_redis_down_and_back(drill: DrillContext) -> None:
    drilled(drill, "redis-down")


def test_kill_the_broker_leading_the_pair_topic(drill: DrillContext) -> None:
    report = drilled(drill, "kill-broker")
    assert report.notes["broker"] in (1, 2, 3)
    assert {"leaders_moved_s", "restart_s", "in_sync_s"} <= report.measures.keys()


def test_kill_one_of_two_workers(drill: DrillContext) -> None:
    report = drilled(drill, "kill-worker")
    # the killed worker's partitions moved to the survivor, then it came back
    assert {"failover_s", "rejoin_s"} <= report.measures.keys()


@pytest.fixture(scope="module")
def cut(drill: DrillContext) -> DrillReport:
    if drill.cut is None:
        pytest.skip(f"cannot cut a worker off here: {cut_unavailable()}")
    return drilled(drill, "cut-worker")


def test_cut_a_worker_off_the_brokers(cut: DrillReport) -> None:
    assert cut.notes["still_running"], "the cut-off worker must ride out the cut"
    assert {"moved_s", "rejoin_s"} <= cut.measures.keys()


def test_a_cut_off_worker_stops_serving_the_partitions_it_lost(
    drill: DrillContext, cut: DrillReport
) -> None:
    # Once the cut heals, the worker learns at its next heartbeat that the group evicted
    # it; meanwhile it must not process the partitions that moved (their new owner did).
    # At most the one micro-batch in flight at the rejoin's rebalance may come again.
    replays = cut.checks["evicted_replays"]
    assert replays <= drill.clients.worker.max_messages, (
        f"the cut-off worker repeated {replays} results of the worker that took its "
        "partitions over, right after the cut healed"
    )


def test_kill_all_workers_and_restart(drill: DrillContext) -> None:
    # repeats after the restart: none translated again (drilled), and some answered by the
    # dedup window, which only a table recovered from its changelog can do (L1 is empty)
    report = drilled(drill, "kill-all-workers")
    assert report.repeats.get("window", 0) > 0, report.repeats


def test_kill_the_sla_job_and_restart_it_on_its_checkpoint(drill: DrillContext) -> None:
    report = drilled(drill, "kill-sla-job")
    windows = report.checks["sla_windows"]
    assert report.notes["windows_before_kill"] > 0  # the first run had emitted some
    assert windows["expected"] > report.notes["windows_before_kill"]  # the restart the rest
    assert windows["missing"] == [], "windows lost across the restart"
    assert windows["emitted_twice"] == [], "windows emitted twice across the restart"
    assert windows["wrong_counts"] == {}, "windows whose counts lost or doubled results"
