"""deploy/prometheus/rules: promtool accepts them, their unit tests pass, metric names exist."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from pipeline.observability.metrics import METRIC_NAMES
from pipeline.settings import PROJECT_ROOT, SlaSettings

PROMETHEUS = PROJECT_ROOT / "deploy" / "prometheus"
RULES = sorted((PROMETHEUS / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (`make system-deps` installs Debian's prometheus)")
    return subprocess.run(
        [promtool, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=PROMETHEUS / "tests",
    )


def _rules() -> list[dict[str, str]]:
    return [
        rule
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
    ]


def test_promtool_checks_the_rules() -> None:
    assert RULES
    done = _promtool("check", "rules", *map(str, RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    done = _promtool("test", "rules", *map(str, RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_use_only_declared_metrics() -> None:
    known = set(METRIC_NAMES)
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    used: set[str] = set()
    for rule in _rules():
        used |= set(re.findall(r"(?<![:\w])(babelstream_[a-z_]+)\b", rule["expr"]))
    assert used, "no metric referenced"
    for name in sorted(used):
        base = next(
            (
                name.removesuffix(s)
                for s in HISTOGRAM_SUFFIXES
                if name.endswith(s) and name.removesuffix(s) in known
            ),
            name,
        )
        assert base in known, f"{name} is not declared in pipeline/observability/metrics.py"
    for rule in _rules():
        for name in re.findall(r"\b([a-z_]+:[a-z_]+:[a-z0-9_]+)\b", rule["expr"]):
            assert name in recorded, f"{name} is used but never recorded"
    # the delivery and readiness alerts page on these
    assert used >= {"babelstream_consumer_committed_lag", "babelstream_worker_ready"}


def test_latency_objective_sits_on_a_histogram_bucket() -> None:
    """The 5 s objective must be a bucket boundary, or the ratio would be interpolated."""
    from pipeline.observability.metrics import REQUEST_LATENCY

    threshold_s = SlaSettings().default_threshold_ms / 1000
    assert threshold_s in REQUEST_LATENCY._upper_bounds
    exprs = " ".join(rule["expr"] for rule in _rules())
    assert f'le="{threshold_s}"' in exprs


def test_every_alert_has_a_severity_and_a_summary() -> None:
    alerts = [rule for rule in _rules() if "alert" in rule]
    assert len(alerts) >= 10
    for alert in alerts:
        assert alert["labels"]["severity"] in {"page", "ticket"}, alert["alert"]  # type: ignore[index]
        assert alert["annotations"]["summary"], alert["alert"]  # type: ignore[index]
