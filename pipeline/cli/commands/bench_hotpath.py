"""``babelstream bench hotpath``: the pipeline's own ceiling, with an engine that costs nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pipeline.cli.commands.bench import _common, _Context, _emit
from pipeline.settings import Settings

# requests of the measured run at bench.scale 1 (at least MIN_REQUESTS at any scale)
DEFAULT_REQUESTS, MIN_REQUESTS = 4000, 100


@click.command()
@_common
@click.option(
    "--requests",
    "n",
    type=click.IntRange(1),
    default=None,
    help=f"Distinct requests, sent at once (default: {DEFAULT_REQUESTS}).",
)
@click.option(
    "--profile/--no-profile",
    default=True,
    show_default=True,
    help="Sample the worker with py-spy while the requests run; say where its time went.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the profile (collapsed stacks) goes [default: var/bench].",
)
@click.pass_obj
def hotpath(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    n: int | None,
    profile: bool,
    out: Path | None,
) -> None:
    """Requests/s, event-loop CPU and worker CPU per request, P50/P99 of the real stack,
    router and worker on the echo engine (a model never called): the pipeline's own cost.
    """
    from pipeline.bench.e2e import measure_e2e
    from pipeline.bench.hotpath import SamplingProfile, hotpath_figures
    from pipeline.bench.target import bench_worker
    from pipeline.bench.workload import make_texts

    ctx = _Context(settings, pair_id)
    n = n or max(MIN_REQUESTS, round(DEFAULT_REQUESTS * ctx.settings.bench.scale))
    out_dir = out or ctx.settings.stack.home / "bench"
    env = {"BABELSTREAM_ENGINE__BACKEND": "echo"}
    with bench_worker(ctx.settings, ctx.target, "bench-worker-hotpath.log", env) as worker:
        # warm: the first requests pay for connections, caches of code and the JIT-less rest
        measure_e2e(ctx.settings, ctx.target, worker, make_texts(MIN_REQUESTS, 0.0, seed=70))
        texts = make_texts(n, 0.0, seed=71)
        if profile and worker.pid is not None:
            sampler = SamplingProfile(worker.pid, out_dir / f"hotpath-{pair_id}.collapsed")
            with sampler:
                run = measure_e2e(ctx.settings, ctx.target, worker, texts)
            where = sampler.summary() | {"profile": str(sampler.out)}
        else:
            run = measure_e2e(ctx.settings, ctx.target, worker, texts)
            where = {}
    figures = hotpath_figures(run)
    extra = {"hotpath": dataclasses.asdict(figures), "where_time_went": where}
    notes = ["engine.backend=echo: the model is loaded and never called"]
    _emit(ctx.report("hotpath", {"hotpath": run}, extra=extra, notes=notes), as_json)
