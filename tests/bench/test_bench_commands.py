"""Every ``babelstream bench`` command, run as a user types it, prints its JSON report.

Each runs with its default sizing (the request counts it derives from the
model's measured call cost, shrunk by ``bench.scale``) and the smallest value
of every other size option, on the demo model; the figures themselves are
the performance pages', not this test's. A bench that crashes with its
defaults fails here first.

The suite (marker ``bench``, ``make test-bench``) runs on a stack of its own
(a broker and Redis on free ports), so it can run beside the integration
suite's stack and workers without sharing a consumer group with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.stack import layout
from tests.integration.stacks import running_stack

pytestmark = pytest.mark.bench

# the smallest run each bench allows; the sizes the bench derives itself stay unset
SMALLEST: dict[str, list[str]] = {
    "engine": ["--seconds", "0.05s", "--sentences", "64", "--batch-sizes", "1,8"],
    "e2e": [],
    "naive": [],
    "compare": [],
    "curve": ["--levels", "0.5", "--level-seconds", "1s", "--out", "{tmp}"],
    "adaptive": ["--phases", "0.1,1.2", "--phase-seconds", "1s"],
    "interference": ["--seconds", "1s", "--bulk-docs", "20", "--max-in-flight", "20"],
    "fairness": ["--flood", "40", "--steady", "8", "--repeat", "1", "--rate", "20"],
    "gateway": ["--clients", "2", "--low-seconds", "1"],
    "hotpath": ["--out", "{tmp}"],
    "replicas": ["--replicas", "1,2", "--budgets", "512", "--seconds", "0.1s"],
    "pairs": [
        *("--pair", "en_en-XA", "--steps", "1,2", "--requests", "20"),
        *("--no-multilingual", "--fleet", "0", "--plot", "{tmp}/pairs.png"),
    ],
    "sla": [
        *("--results", "200", "--pairs", "1", "--rate", "100", "--rounds", "1"),
        *("--no-warmup", "--config", "full"),
    ],
    "bulk-memory": ["--mb", "0.2", "--work-dir", "{tmp}"],
}


@pytest.fixture(scope="module")
def bench_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a command run against a stack of this suite's own."""
    home = tmp_path_factory.mktemp("bench-stack")
    with running_stack(home, brokers=1, secure=False) as settings:
        stack = settings.stack
        yield {
            **os.environ,
            **layout.client_environment(settings),
            "BABELSTREAM_STACK__HOME": str(stack.home),
            "BABELSTREAM_STACK__KAFKA_PORT": str(stack.kafka_port),
            "BABELSTREAM_STACK__KAFKA_CONTROLLER_PORT": str(stack.kafka_controller_port),
            "BABELSTREAM_STACK__KAFKA_SSL_PORT": str(stack.kafka_ssl_port),
            "BABELSTREAM_STACK__REDIS_PORT": str(stack.redis_port),
            "BABELSTREAM_WORKER__DATA_DIR": str(home / "faust"),
            "BABELSTREAM_BENCH__SCALE": "0.01",
        }


def bench_commands() -> list[str]:
    from pipeline.cli.commands.bench import bench

    return sorted(bench.list_commands(None))  # type: ignore[arg-type]


def test_every_bench_command_is_covered() -> None:
    assert sorted(SMALLEST) == bench_commands()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_a_bench_runs_with_its_defaults(
    bench_env: dict[str, str], name: str, tmp_path: Path
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMALLEST[name]]
    command = [sys.executable, "-m", "pipeline", "bench", name, *args, "--json"]
    run = subprocess.run(command, env=bench_env, capture_output=True, text=True, timeout=840)
    assert run.returncode == 0, f"{' '.join(command[2:])}\n{run.stderr[-3000:]}"
    out = run.stdout.strip()
    # one JSON line (the last; some benches say more before it), or one JSON document
    try:
        report = json.loads(out.splitlines()[-1])
    except ValueError:
        report = json.loads(out)
    assert isinstance(report, dict) and report, out[-2000:]
    if name == "hotpath":
        # the router in the worker's process and in one of its own: every request answered
        assert {layout: run["missing"] for layout, run in report["runs"].items()} == {
            "together": 0,
            "apart": 0,
        }
        assert report["extra"]["hotpath"]["apart"]["router_cpu_ms_per_request"] > 0
        assert report["extra"]["hotpath"]["together"]["router_cpu_ms_per_request"] is None
        assert report["ratios"]["apart_over_together_rps"] > 0
