"""The latency-load curve plot is a PNG with one marker per level."""

from __future__ import annotations

from pipeline.bench.plot import plot_curve
from pipeline.bench.report import LoadFigures


def test_curve_png_is_written(tmp_path):
    points = [
        LoadFigures(
            requests=20,
            results=20,
            missing=0,
            duration_s=10.0,
            throughput_rps=rate,
            tokens_per_s=0.0,
            p50_ms=50 * k,
            p95_ms=80 * k,
            p99_ms=90 * k,
            offered_rps=rate,
        )
        for k, rate in enumerate((1.0, 2.0, 3.0), start=1)
    ]
    path = plot_curve(points, tmp_path / "out" / "curve.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
