"""``babelstream bench hotpath``: the pipeline's own ceiling, with an engine that costs nothing."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pipeline.cli.commands.bench import _common, _Context, _emit
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.bench.report import LoadFigures

# requests of the measured run at bench.scale 1 (at least MIN_REQUESTS at any scale)
DEFAULT_REQUESTS, MIN_REQUESTS = 4000, 100
# where the router runs: in the worker's process (a worker's default), or in one of its own
# (`worker --router-only` beside `worker --no-router`, as on Kubernetes)
LAYOUTS = ("together", "apart")


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
    "--layout",
    "layouts",
    type=click.Choice(LAYOUTS),
    multiple=True,
    help="Where the router runs: in the worker (together) or in a process of its own "
    "(apart); repeat for both, side by side [default: both].",
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
    help="Where the profiles (collapsed stacks) go [default: var/bench].",
)
@click.pass_obj
def hotpath(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    n: int | None,
    layouts: tuple[str, ...],
    profile: bool,
    out: Path | None,
) -> None:
    """Requests/s, event-loop CPU and worker CPU per request, P50/P99 of the real stack,
    router and worker on the echo engine (a model never called): the pipeline's own cost,
    with the router in the worker's process and in one of its own.
    """
    from pipeline.bench.hotpath import hotpath_figures
    from pipeline.bench.report import ratio

    ctx = _Context(settings, pair_id)
    n = n or max(MIN_REQUESTS, round(DEFAULT_REQUESTS * ctx.settings.bench.scale))
    out_dir = out or ctx.settings.stack.home / "bench"
    chosen = [layout for layout in LAYOUTS if layout in layouts] if layouts else list(LAYOUTS)
    runs: dict[str, LoadFigures] = {}
    where: dict[str, Any] = {}
    for layout in chosen:
        runs[layout], where[layout] = _measure(ctx, layout, n, profile, out_dir)
    figures = {layout: dataclasses.asdict(hotpath_figures(run)) for layout, run in runs.items()}
    extra = {"hotpath": figures, "where_time_went": where}
    ratios = {}
    if len(runs) == len(LAYOUTS):
        together, apart = runs["together"].throughput_rps, runs["apart"].throughput_rps
        ratios["apart_over_together_rps"] = ratio(apart, together)
    notes = ["engine.backend=echo: the model is loaded and never called"]
    report = ctx.report("hotpath", dict(runs), ratios=ratios, extra=extra, notes=notes)
    _emit(report, as_json)


def _measure(
    ctx: _Context, layout: str, n: int, profile: bool, out_dir: Path
) -> tuple[LoadFigures, dict[str, Any]]:
    """One layout's warmed run of ``n`` distinct requests, and where the worker's time went."""
    from pipeline.bench.e2e import measure_e2e
    from pipeline.bench.hotpath import SamplingProfile
    from pipeline.bench.target import bench_router, bench_worker
    from pipeline.bench.workload import make_texts

    apart = layout == "apart"
    env = {"BABELSTREAM_ENGINE__BACKEND": "echo"}
    with ExitStack() as stack:
        worker = stack.enter_context(
            bench_worker(
                ctx.settings,
                ctx.target,
                f"bench-worker-hotpath-{layout}.log",
                env,
                args=["--no-router"] if apart else (),
                probe=not apart,
            )
        )
        router = (
            stack.enter_context(bench_router(ctx.settings, ctx.target, "bench-router-hotpath.log"))
            if apart
            else None
        )
        # warm: the first requests pay for connections, caches of code and the JIT-less rest
        warm = make_texts(MIN_REQUESTS, 0.0, seed=70)
        measure_e2e(ctx.settings, ctx.target, worker, warm, router=router)
        texts = make_texts(n, 0.0, seed=71)
        if not profile or worker.pid is None:
            return measure_e2e(ctx.settings, ctx.target, worker, texts, router=router), {}
        profile_file = out_dir / f"hotpath-{ctx.target.pair_id}-{layout}.collapsed"
        sampler = SamplingProfile(worker.pid, profile_file)
        with sampler:
            run = measure_e2e(ctx.settings, ctx.target, worker, texts, router=router)
        return run, sampler.summary() | {"profile": str(sampler.out)}
