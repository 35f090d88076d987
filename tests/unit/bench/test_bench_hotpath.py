"""bench hotpath's arithmetic: CPU per request from a run, and where py-spy's samples went."""

from __future__ import annotations

from pipeline.bench.cpu import CpuUse
from pipeline.bench.hotpath import hotpath_figures, part_of, where_time_went
from pipeline.bench.report import LoadFigures

PROC = 'process 7:"python -m pipeline worker"'
LOOP = "_run_once (asyncio/base_events.py:1922)"
COLLAPSED = "\n".join(
    [
        f"{PROC};{LOOP};send (/v/site-packages/aiokafka/producer/producer.py:470) 30",
        f"{PROC};{LOOP};start_span (/v/site-packages/opentelemetry/sdk/trace/x.py:11) 20",
        f"{PROC};run (/app/pipeline/steps/translate.py:90);encode (/app/pipeline/engine/t.py:6) 10",
        f"{PROC};select (selectors.py:468) 40",
        "not a sample line",
    ]
)


def test_samples_are_shared_by_the_part_of_their_innermost_frame() -> None:
    where = where_time_went(COLLAPSED, top=2)
    assert where["samples"] == 100
    assert where["by_part"] == {
        "other": 0.4,
        "aiokafka": 0.3,
        "opentelemetry": 0.2,
        "engine": 0.1,
    }
    assert list(where["top_functions"]) == [  # type: ignore[call-overload]
        "select (selectors.py:468)",
        "send (/v/site-packages/aiokafka/producer/producer.py:470)",
    ]
    assert where_time_went("")["samples"] == 0
    assert part_of("Py_RunMain") == "native"


def saturating_run(cpu: CpuUse, router_cpu: CpuUse | None = None) -> LoadFigures:
    """1,000 requests answered in 2 s."""
    return LoadFigures(
        requests=1000,
        results=1000,
        missing=0,
        duration_s=2.0,
        throughput_rps=500.0,
        tokens_per_s=0.0,
        p50_ms=40.0,
        p95_ms=80.0,
        p99_ms=90.0,
        cpu=cpu,
        router_cpu=router_cpu,
    )


def test_cpu_per_request_from_the_cores_a_run_kept_busy() -> None:
    cpu = CpuUse(wall_s=2.0, engine_cores=0.5, loop_cores=0.25, other_cores=1.0, machine_cores=2)
    figures = hotpath_figures(saturating_run(cpu))
    assert figures.loop_cpu_ms_per_request == 0.5  # 0.25 cores x 2 s / 1000
    assert figures.worker_cpu_ms_per_request == 1.5  # 0.75 cores x 2 s / 1000
    assert (figures.throughput_rps, figures.p99_ms) == (500.0, 90.0)
    # the router in the worker's process: its cost is in the worker's figures
    assert figures.router_cpu_ms_per_request is None


def test_a_router_apart_is_counted_on_its_own() -> None:
    worker = CpuUse(wall_s=2.0, engine_cores=0.2, loop_cores=0.2, other_cores=1.0, machine_cores=2)
    router = CpuUse(wall_s=2.0, engine_cores=0.1, loop_cores=0.15, other_cores=1.2, machine_cores=2)
    figures = hotpath_figures(saturating_run(worker, router))
    assert figures.worker_cpu_ms_per_request == 0.8  # 0.4 cores x 2 s / 1000
    assert figures.router_cpu_ms_per_request == 0.5  # (0.1 + 0.15) cores x 2 s / 1000
