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


def plot_pairs(
    pairs: Sequence[int], throughput: Sequence[float], batch: Sequence[float | None], path: Path
) -> Path:
    """Throughput and mean engine batch against the pairs the load was spread over."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra("matplotlib", "dev") from None
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=120)
    left.plot(pairs, throughput, marker="o")
    left.set_ylabel("throughput (requests/s)")
    left.set_ylim(bottom=0)
    right.plot(pairs, [b or 0.0 for b in batch], marker="o", color="tab:orange")
    right.set_ylabel("mean engine batch (texts per call)")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(pairs), [str(p) for p in pairs])
        ax.set_xlabel("pairs the same load is spread over (one model)")
        ax.grid(True, alpha=0.3)
    fig.suptitle("bench pairs: cost follows the model and the work, not the pairs", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
