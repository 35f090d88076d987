"""``babelstream bench gateway``: N HTTP clients against producing straight to Kafka."""

from __future__ import annotations

from typing import Any

import click

from pipeline.cli.commands.bench import _common, _Context, _emit, _sizes
from pipeline.settings import Settings


@click.command()
@_common
@click.option(
    "--clients",
    type=click.IntRange(1, 1024),
    default=512,
    show_default=True,
    help="Concurrent HTTP clients, each sending single-text calls one after another.",
)
@click.option(
    "--requests",
    "n",
    type=click.IntRange(1),
    default=None,
    help="Texts per saturation run (default: sized from the model's call cost).",
)
@click.option(
    "--low-load",
    type=click.FloatRange(0.01, 0.9),
    default=0.1,
    show_default=True,
    help="Low load for P50/P99, as a fraction of the Kafka path's saturation throughput.",
)
@click.option(
    "--low-seconds",
    type=click.FloatRange(1),
    default=15.0,
    show_default=True,
    help="Paced load at low load, per path.",
)
@click.pass_obj
def gateway(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    clients: int,
    n: int | None,
    low_load: float,
    low_seconds: float,
) -> None:
    """The gateway against the Kafka path, side by side on one worker: throughput (Kafka,
    gateway, Kafka again), mean engine batch size, P50/P99 at low load, alone and beside one
    anonymous caller sending calls at the gateway's limits, the gateway's CPU.
    """
    from pipeline.bench.e2e import measure_e2e
    from pipeline.bench.gateway import heavy_calls, mean_batch, measure_http
    from pipeline.bench.report import ratio
    from pipeline.bench.target import bench_worker
    from pipeline.bench.workload import make_texts
    from pipeline.gateway.process import GatewayProcess

    ctx = _Context(settings, pair_id)
    n = _sizes(ctx.settings, ctx.translator(), ctx.target.entry.pair, n, 30.0)
    log = ctx.settings.stack.home / "log"
    runs: dict[str, Any] = {}
    env = {**ctx.target.env(), "BABELSTREAM_GATEWAY__INSTANCE_ID": "bench"}
    with (
        bench_worker(ctx.settings, ctx.target, "bench-worker.log") as worker,
        GatewayProcess(ctx.settings, log_path=log / "bench-gateway.log", env=env) as gw,
    ):
        # A-B-A: the Kafka path before and after the gateway, on fresh texts each time
        runs["kafka"] = measure_e2e(ctx.settings, ctx.target, worker, make_texts(n, 0.0, seed=70))
        runs["gateway"], gateway_cores, _ = measure_http(
            ctx.settings, ctx.target, worker, gw, make_texts(n, 0.0, seed=71), clients
        )
        runs["kafka_after"] = measure_e2e(
            ctx.settings, ctx.target, worker, make_texts(n, 0.0, seed=72)
        )
        kafka_rps = (runs["kafka"].throughput_rps + runs["kafka_after"].throughput_rps) / 2
        rate = round(low_load * kafka_rps, 2)
        count = max(20, round(rate * low_seconds))
        runs["kafka_low"] = measure_e2e(
            ctx.settings, ctx.target, worker, make_texts(count, 0.0, seed=73), rate
        )
        runs["gateway_low"], gateway_low_cores, _ = measure_http(
            ctx.settings, ctx.target, worker, gw, make_texts(count, 0.0, seed=74), clients, rate
        )
        limits = ctx.settings.gateway
        # more calls than the phase can take: the heavy caller stops when the small calls end
        heavy_n = max(4, 2 * round(low_seconds))
        heavy = heavy_calls(
            make_texts(heavy_n * limits.batch_limit, 0.0, seed=76),
            limits.char_limit,
            limits.batch_limit,
        )[:heavy_n]
        runs["gateway_low_heavy"], _, heavy_statuses = measure_http(
            ctx.settings,
            ctx.target,
            worker,
            gw,
            make_texts(count, 0.0, seed=75),
            clients,
            rate,
            heavy,
        )
    ratios = {
        "gateway_over_kafka": ratio(runs["gateway"].throughput_rps, kafka_rps),
        "mean_engine_batch_gateway": mean_batch(runs["gateway"].engine_batch_sizes),
        "mean_engine_batch_kafka": mean_batch(runs["kafka"].engine_batch_sizes),
        "gateway_cores": gateway_cores,
        "gateway_cores_low": gateway_low_cores,
        "gateway_ms_cpu_per_call": round(1000 * gateway_cores / runs["gateway"].throughput_rps, 3)
        if runs["gateway"].throughput_rps
        else None,
        "p50_low_gateway_ms": runs["gateway_low"].p50_ms,
        "p99_low_gateway_ms": runs["gateway_low"].p99_ms,
        "p50_low_kafka_ms": runs["kafka_low"].p50_ms,
        "p99_low_kafka_ms": runs["kafka_low"].p99_ms,
        "p99_low_heavy_gateway_ms": runs["gateway_low_heavy"].p99_ms,
        "p99_beside_heavy_over_alone": ratio(
            runs["gateway_low_heavy"].p99_ms, runs["gateway_low"].p99_ms
        ),
    }
    notes = [
        "gateway latency is the HTTP client's (send to answer); the Kafka path's is the "
        "result's latency_ms (submitted_at to completed_at at the worker)",
        "gateway_over_kafka holds the gateway's throughput against the mean of the Kafka "
        "runs before and after it",
        "gateway_low_heavy is gateway_low's paced load (fresh texts) while one caller without "
        "an API key sends calls of char_limit characters in up to batch_limit texts, one after "
        "another; heavy_calls counts them by status (429: the anonymous quota); "
        "p99_beside_heavy_over_alone should stay within 1.5",
    ]
    extra = {
        "clients": clients,
        "low_load_rps": rate,
        "low_load_fraction": low_load,
        "heavy_calls": heavy_statuses,
    }
    report = ctx.report("gateway", runs, ratios=ratios, notes=notes, extra=extra)
    if not as_json:
        click.echo(
            f"gateway/kafka {ratios['gateway_over_kafka']}  mean engine batch "
            f"{ratios['mean_engine_batch_gateway']} (kafka {ratios['mean_engine_batch_kafka']})  "
            f"gateway CPU {gateway_cores} cores  low load P50/P99 gateway "
            f"{ratios['p50_low_gateway_ms']}/{ratios['p99_low_gateway_ms']} ms, kafka "
            f"{ratios['p50_low_kafka_ms']}/{ratios['p99_low_kafka_ms']} ms; P99 beside a "
            f"heavy caller {ratios['p99_beside_heavy_over_alone']}x alone",
            err=True,
        )
    _emit(report, as_json)
