"""The latency-load curve as a PNG (matplotlib, imported only here)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.bench.report import LoadFigures
from pipeline.errors import missing_extra


def plot_curve(points: Sequence[LoadFigures], path: Path, title: str) -> Path:
    """P50/P95/P99 latency against achieved throughput, one marker per load level."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra("matplotlib", "dev") from None
    throughput = [p.throughput_rps for p in points]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for key, label in (("p50_ms", "P50"), ("p95_ms", "P95"), ("p99_ms", "P99")):
        ax.plot(throughput, [getattr(p, key) for p in points], marker="o", label=label)
    for p in points:
        if p.offered_rps is not None:
            ax.annotate(
                f"{p.offered_rps:.3g}",
                (p.throughput_rps, p.p99_ms),
                fontsize=7,
                textcoords="offset points",
                xytext=(0, 5),
                ha="center",
            )
    ax.set_xlabel("throughput (requests/s); labels: offered load (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
