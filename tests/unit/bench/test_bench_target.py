"""Bench targets (which registry serves a pair) and the report every bench prints."""

from __future__ import annotations

import pytest

from pipeline.bench.report import BenchReport, LoadFigures, Machine, RunSettings, ratio
from pipeline.bench.target import resolve_target
from pipeline.errors import ConfigError
from pipeline.settings import load_settings


def test_pairs_resolve_to_the_registry_that_serves_them(tmp_path):
    settings = load_settings()
    demo = resolve_target(settings, "en_en-XA")
    assert demo.registry == settings.engine.registry
    assert demo.env() == {"BABELSTREAM_ENGINE__REGISTRY": str(settings.engine.registry)}
    missing = settings.model_copy(
        update={
            "engine": settings.engine.model_copy(update={"bench_registry": tmp_path / "none.toml"})
        }
    )
    with pytest.raises(ConfigError, match="build-bench"):
        resolve_target(missing, "en_en-XB")


def test_report_serialises_to_json():
    settings = load_settings()
    target = resolve_target(settings, "en_en-XA")
    figures = LoadFigures(
        requests=2,
        results=2,
        missing=0,
        duration_s=1.0,
        throughput_rps=2.0,
        tokens_per_s=10.0,
        p50_ms=1.0,
        p95_ms=2.0,
        p99_ms=3.0,
    )
    report = BenchReport(
        "e2e",
        Machine.current(),
        RunSettings.of(settings, target.entry),
        {"e2e": figures},
        ratios={"x": ratio(1, 0)},
    )
    doc = report.to_dict()
    assert doc["runs"]["e2e"]["throughput_rps"] == 2.0
    assert doc["settings"]["pair"] == "en_en-XA"
    assert doc["ratios"] == {"x": None}
    assert '"bench": "e2e"' in report.to_json()
