"""``babelstream bench ...``: benchmarks, each printing one typed report (``BenchReport``).

Every bench takes ``--pair`` (the demo model's ``en_en-XA`` by default, or
``en_en-XB`` after ``babelstream models build-bench``) and sizes its default
workload from the model's measured call cost, so each finishes in a few
minutes on a small machine. Benches that start a worker refuse to run while
another worker consumes the pair.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pipeline.cli.commands.options import Duration
from pipeline.cli.main import LazyGroup
from pipeline.settings import Settings
from pipeline.stack.local_worker import DEMO_PAIR

if TYPE_CHECKING:
    from pipeline.contract.pairs import Pair

F = TypeVar("F", bound=Callable[..., Any])

# benches with modules of their own (the SLA job's, the bulk and control ones)
LAZY: dict[str, str] = {
    "sla": "pipeline.cli.commands.bench_sla:sla",
    "bulk-memory": "pipeline.cli.commands.bench_memory:bulk_memory",
    "fairness": "pipeline.cli.commands.bench_fairness:fairness",
    "pairs": "pipeline.cli.commands.bench_pairs:pairs",
    "gateway": "pipeline.cli.commands.bench_gateway:gateway",
    "hotpath": "pipeline.cli.commands.bench_hotpath:hotpath",
    "replicas": "pipeline.cli.commands.bench_replicas:replicas",
}


@click.group(cls=LazyGroup, lazy=LAZY)
def bench() -> None:
    """Benchmarks; each prints one JSON report (--json: on one line)."""


def _common(f: F) -> F:
    f = click.option("--json", "as_json", is_flag=True, help="Print the report on one line.")(f)
    return click.option(
        "--pair",
        "pair_id",
        default=DEMO_PAIR.id,
        show_default=True,
        help="Pair to measure (en_en-XB: the model of `babelstream models build-bench`).",
    )(f)


def _workload(f: F) -> F:
    f = click.option(
        "--repeat-ratio",
        type=click.FloatRange(0, 0.99),
        default=0.0,
        show_default=True,
        help="Share of requests that repeat earlier ones.",
    )(f)
    return click.option(
        "--requests",
        "n",
        type=click.IntRange(1),
        default=None,
        help="Requests (default: sized from the model's call cost).",
    )(f)


def _emit(report: Any, as_json: bool) -> None:
    click.echo(report.to_json(indent=None if as_json else 2))


class _Context:
    """What every bench needs: the target, its translator (loaded lazily), the report header."""

    def __init__(self, settings: Settings, pair_id: str, *, kafka: bool = True) -> None:
        from pipeline.bench.report import Machine, RunSettings
        from pipeline.bench.target import resolve_target
        from pipeline.kafka.reachability import require_kafka

        self.machine = Machine.current()  # before anything of ours loads the machine
        if kafka:
            require_kafka(settings.kafka)  # one line now, not a client timeout later
        self.target = resolve_target(settings, pair_id)
        self.settings = self.target.settings(settings)
        self.run_settings = RunSettings.of(self.settings, self.target.entry)

    def translator(self) -> Any:
        from pipeline.engine.translator import CTranslate2Translator

        return CTranslate2Translator.from_settings(self.settings.engine, [self.target.pair_id])

    def report(self, name: str, runs: dict[str, Any], **kwargs: Any) -> Any:
        from pipeline.bench.report import BenchReport

        notes = list(kwargs.pop("notes", []))
        if self.machine.under_load:
            notes.insert(
                0,
                f"measured under load: load average {self.machine.load_avg_1m} "
                f"on {self.machine.cpus} cores when the run started",
            )
        if self.target.entry.decoding == "input_length":
            notes.append(
                "decoding=input_length: random weights never stop, so every sequence "
                "decodes exactly as many tokens as its own source"
                + ("" if self.run_settings.beam_size == 1 else " (beams: as the call's longest)")
            )
        return BenchReport(name, self.machine, self.run_settings, runs, notes=notes, **kwargs)


def _sizes(
    settings: Settings,
    translator: Any,
    pair: Pair,
    n: int | None,
    seconds: float,
    *,
    one_at_a_time: bool = False,
) -> int:
    """``n``, or as many requests as the engine handles in about ``seconds`` (times the
    ``bench.scale`` setting)."""
    if n is not None:
        return n
    from pipeline.bench.sizing import requests_for

    scaled = seconds * settings.bench.scale
    return requests_for(translator, pair, scaled, one_at_a_time=one_at_a_time)


@bench.command()
@_common
@click.option(
    "--seconds",
    type=Duration(min_s=0, min_open=True),
    default="3s",
    show_default=True,
    help="Minimum time per configuration.",
)
@click.option(
    "--sentences",
    default=256,
    show_default=True,
    type=click.IntRange(64),
    help="Generated sentences (3-40 words) cycled through.",
)
@click.option(
    "--batch-sizes", default="1,8,32,64", show_default=True, help="Comma-separated batch sizes."
)
@click.option(
    "--compute-types",
    default=None,
    help="Comma-separated (default: the candidates of compute_type=auto here).",
)
@click.pass_obj
def engine(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    seconds: float,
    sentences: int,
    batch_sizes: str,
    compute_types: str | None,
) -> None:
    """Raw engine: batch sizes per compute type, the measured profile and call costs."""
    import ctranslate2

    from pipeline.bench.engine import generated_sentences, measure_fixed
    from pipeline.bench.report import ratio
    from pipeline.engine.profile import candidates
    from pipeline.engine.translator import CTranslate2Translator
    from pipeline.observability.progress import progress_bar

    ctx = _Context(settings, pair_id, kafka=False)
    pair = ctx.target.entry.pair
    profiled = ctx.translator()  # measures (or reads) the profile: compute type, call costs
    profile = profiled.profile(pair)
    texts = generated_sentences(sentences)
    e = ctx.settings.engine
    runs: dict[str, Any] = {}
    types = (
        compute_types.split(",")
        if compute_types
        else candidates(profiled.device, ctranslate2.get_supported_compute_types(profiled.device))
    )
    sizes = sorted(int(b) for b in batch_sizes.split(","))
    with progress_bar("configurations", total=len(types) * len(sizes)) as bar:
        for ctype in types:
            translator = CTranslate2Translator(
                [ctx.target.entry],
                device=e.device,
                compute_type=ctype,
                inter_threads=profiled.inter_threads,
                intra_threads=profiled.intra_threads,
                beam_size=e.beam_size,
            )
            prepared = translator.prepare(texts, [pair] * len(texts))
            for size in sizes:
                bar.set_postfix_str(f"{ctype} batch {size}")
                runs[f"{ctype}/batch{size}"] = measure_fixed(
                    translator, pair, prepared, batch_size=size, min_seconds=seconds
                )
                bar.update()
    # what batching is worth: the best batch size against the smallest one measured
    ratios: dict[str, float | None] = {
        f"{ct}_batching_gain": ratio(
            max(runs[f"{ct}/batch{size}"].sentences_per_s for size in sizes),
            runs[f"{ct}/batch{sizes[0]}"].sentences_per_s,
        )
        for ct in types
    }
    extra = {"profile": profile.to_json() if profile else None}
    _emit(ctx.report("engine", runs, ratios=ratios, extra=extra), as_json)


def _rate(f: F) -> F:
    return click.option(
        "--rate",
        type=float,
        default=None,
        help="Requests per second (default: all at once = saturation).",
    )(f)


def _single_command(name: str, help_text: str, *, naive: bool) -> None:
    """Register ``bench e2e`` / ``bench naive``: one run of one kind on one workload."""

    @bench.command(name, help=help_text)
    @_common
    @_workload
    @_rate
    @click.pass_obj
    def command(
        settings: Settings,
        pair_id: str,
        as_json: bool,
        n: int | None,
        repeat_ratio: float,
        rate: float | None,
    ) -> None:
        from pipeline.bench.e2e import measure_e2e, measure_naive
        from pipeline.bench.target import bench_worker
        from pipeline.bench.workload import make_texts

        ctx = _Context(settings, pair_id)
        # sized to run about a minute (naive: one at a time) or half a minute (batched)
        seconds = 60.0 if naive else 30.0
        n = _sizes(
            ctx.settings, ctx.translator(), ctx.target.entry.pair, n, seconds, one_at_a_time=naive
        )
        texts = make_texts(n, repeat_ratio)
        if naive:
            figures = measure_naive(ctx.settings, ctx.target, texts, rate)
        else:
            with bench_worker(ctx.settings, ctx.target, "bench-worker.log") as worker:
                figures = measure_e2e(ctx.settings, ctx.target, worker, texts, rate)
        _emit(ctx.report(name, {name: figures}), as_json)


_single_command(
    "e2e",
    "Whole pipeline: router, micro-batching, dedup, caches (starts and stops a worker).",
    naive=False,
)
_single_command(
    "naive",
    "Baseline: a plain kafka-python consumer translating and committing one at a time.",
    naive=True,
)


@bench.command()
@_common
@_workload
@click.option(
    "--naive-requests",
    type=click.IntRange(1),
    default=None,
    help="Requests for the naive consumer: the first N of the same workload "
    "(default: sized so it runs about a minute).",
)
@click.pass_obj
def compare(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    n: int | None,
    repeat_ratio: float,
    naive_requests: int | None,
) -> None:
    """Engine ceiling, e2e, the ceiling again, and naive on one workload, in one run.

    Prints e2e/engine (against the mean of the two ceilings), e2e/naive, and
    how far the machine's speed moved between the two ceilings.
    """
    from pipeline.bench.compare import run_compare
    from pipeline.bench.e2e import measure_e2e, measure_naive
    from pipeline.bench.engine import measure_ceiling
    from pipeline.bench.report import EngineFigures, LoadFigures
    from pipeline.bench.target import bench_worker, refuse_if_served
    from pipeline.bench.workload import make_texts
    from pipeline.engine.batching import TokenBudgetBatcher

    ctx = _Context(settings, pair_id)
    pair = ctx.target.entry.pair
    refuse_if_served(  # before minutes of engine work
        ctx.settings.kafka, ctx.target.entry.model_id, grace_s=ctx.settings.worker.session_timeout_s
    )
    translator = ctx.translator()
    n = _sizes(ctx.settings, translator, pair, n, 30.0)
    n_naive = min(
        n, _sizes(ctx.settings, translator, pair, naive_requests, 60.0, one_at_a_time=True)
    )
    texts = make_texts(n, repeat_ratio)
    distinct = list(dict.fromkeys(texts))
    batcher = TokenBudgetBatcher(ctx.settings.worker.token_budget, cost=translator.cost_model(pair))
    # the first ceiling on this translator, the second on one loaded after e2e; none is
    # held while e2e runs (its memory and threads are the worker's then)
    unused = [translator]
    del translator

    def ceiling() -> EngineFigures:
        engine = unused.pop() if unused else ctx.translator()
        try:
            return measure_ceiling(engine, pair, distinct, batcher)
        finally:
            del engine

    def e2e() -> LoadFigures:
        with bench_worker(ctx.settings, ctx.target, "bench-worker.log") as worker:
            return measure_e2e(ctx.settings, ctx.target, worker, texts)

    runs = run_compare(
        ceiling, e2e, lambda: measure_naive(ctx.settings, ctx.target, texts[:n_naive])
    )
    ratios = runs.ratios()
    notes = []
    if repeat_ratio:
        notes.append(
            "the engine ceiling translates the distinct texts only; with repeats "
            "e2e/engine counts the cache's answers too"
        )
    report = ctx.report(
        "compare",
        {
            "engine": runs.engine,
            "e2e": runs.e2e,
            "engine_after": runs.engine_after,
            "naive": runs.naive,
        },
        ratios=ratios,
        notes=notes,
    )
    if not as_json:
        click.echo(
            f"e2e/engine {ratios['e2e_over_engine']} "
            f"(per engine core {ratios['e2e_over_engine_per_engine_core']})  "
            f"e2e/naive {ratios['e2e_over_naive']}  "
            f"engine after/before {ratios['engine_after_over_before']}",
            err=True,
        )
    _emit(report, as_json)


@bench.command()
@_common
@click.option(
    "--levels",
    default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0",
    show_default=True,
    help="Load levels, as fractions of the measured saturation throughput.",
)
@click.option(
    "--level-seconds",
    type=Duration(min_s=1),
    default="12s",
    show_default=True,
    help="Paced load per level.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where curve-<pair>.json and .png go (default: var/bench).",
)
@click.pass_obj
def curve(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    levels: str,
    level_seconds: float,
    out_dir: Path | None,
) -> None:
    """P50/P95/P99 and throughput at 10%..100% of saturation; JSON and a PNG plot."""
    from pipeline.bench.e2e import measure_e2e
    from pipeline.bench.plot import plot_curve
    from pipeline.bench.target import bench_worker
    from pipeline.bench.workload import make_texts

    ctx = _Context(settings, pair_id)
    fractions = [float(x) for x in levels.split(",")]
    n_sat = _sizes(ctx.settings, ctx.translator(), ctx.target.entry.pair, None, 20.0)
    points = []
    with bench_worker(ctx.settings, ctx.target, "bench-worker.log") as worker:
        saturation = measure_e2e(ctx.settings, ctx.target, worker, make_texts(n_sat, 0.0, seed=50))
        for k, fraction in enumerate(fractions):
            rate = fraction * saturation.throughput_rps
            count = max(20, round(rate * level_seconds))
            texts = make_texts(count, 0.0, seed=51 + k)
            points.append(measure_e2e(ctx.settings, ctx.target, worker, texts, rate))
            if not as_json:
                p = points[-1]
                click.echo(
                    f"  {fraction:4.0%} offered {rate:7.2f}/s: {p.throughput_rps:7.2f}/s "
                    f"P50 {p.p50_ms:7.0f} P95 {p.p95_ms:7.0f} P99 {p.p99_ms:7.0f} ms",
                    err=True,
                )
    runs: dict[str, Any] = {"saturation": saturation, "curve": points}
    report = ctx.report("curve", runs, extra={"levels": fractions})
    out_dir = out_dir or ctx.settings.stack.home / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"curve-{pair_id}.json").write_text(report.to_json(), encoding="utf-8")
    title = f"{ctx.target.entry.model_id} ({pair_id}), {ctx.machine.cpus} cores" + (
        ", under load" if ctx.machine.under_load else ""
    )
    png = plot_curve(points, out_dir / f"curve-{pair_id}.png", title)
    click.echo(f"wrote {png} and {png.with_suffix('.json')}", err=True)
    _emit(report, as_json)


@bench.command()
@_common
@click.option(
    "--p95-ms",
    type=click.FloatRange(min=1),
    default=None,
    help="Latency objective (default: the pair's batching.p95_ms).",
)
@click.option(
    "--phases",
    default="0.1,0.4,1.2,0.4,0.1",
    show_default=True,
    help="Ramp: load per phase, as fractions of the default setting's saturation.",
)
@click.option(
    "--phase-seconds",
    type=Duration(min_s=1),
    default="12s",
    show_default=True,
    help="Paced load per phase of the ramp.",
)
@click.pass_obj
def adaptive(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    p95_ms: float | None,
    phases: str,
    phase_seconds: float,
) -> None:
    """A load ramp (low, saturation, low) with the controller and with static settings."""
    import json as json_module

    from pipeline.bench.e2e import measure_e2e
    from pipeline.bench.report import ratio
    from pipeline.bench.target import bench_worker
    from pipeline.bench.workload import make_texts

    ctx = _Context(settings, pair_id)
    objective = p95_ms or ctx.settings.batching.objective_ms(pair_id)
    fractions = [float(x) for x in phases.split(",")]
    n_sat = _sizes(ctx.settings, ctx.translator(), ctx.target.entry.pair, None, 20.0)
    w = ctx.settings.worker
    configs: dict[str, dict[str, str]] = {
        "static_default": {},
        "static_large": {
            "BABELSTREAM_WORKER__MAX_MESSAGES": str(4 * w.max_messages),
            "BABELSTREAM_WORKER__MAX_WAIT_S": str(10 * w.max_wait_s),
            "BABELSTREAM_WORKER__TOKEN_BUDGET": str(4 * w.token_budget),
        },
        "adaptive": {
            "BABELSTREAM_BATCHING__ADAPTIVE": "true",
            "BABELSTREAM_BATCHING__P95_MS": json_module.dumps({pair_id: objective}),
        },
    }
    runs: dict[str, Any] = {}
    saturation_rps = 0.0
    for name, env in configs.items():  # static_default first: it sets the ramp's scale
        with bench_worker(ctx.settings, ctx.target, f"bench-worker-{name}.log", env=env) as worker:
            if not saturation_rps:
                texts = make_texts(n_sat, 0.0, seed=60)
                runs["saturation_static_default"] = measure_e2e(
                    ctx.settings, ctx.target, worker, texts
                )
                saturation_rps = runs["saturation_static_default"].throughput_rps
            ramp = []
            for k, fraction in enumerate(fractions):
                rate = fraction * saturation_rps
                texts = make_texts(max(20, round(rate * phase_seconds)), 0.0, seed=61 + k)
                ramp.append(measure_e2e(ctx.settings, ctx.target, worker, texts, rate))
            runs[name] = ramp
    peak = fractions.index(max(fractions))
    statics = {k: runs[k][peak].throughput_rps for k in configs if k.startswith("static")}
    best_static = max(statics, key=lambda k: statics[k])
    ratios = {
        "adaptive_over_best_static_at_peak": ratio(
            runs["adaptive"][peak].throughput_rps, statics[best_static]
        )
    }
    for name in configs:
        met = [p.p95_ms <= objective for k, p in enumerate(runs[name]) if k != peak]
        ratios[f"{name}_phases_within_objective"] = round(sum(met) / len(met), 3) if met else 1.0
    extra = {
        "p95_objective_ms": objective,
        "phases": fractions,
        "best_static": best_static,
        "configs": configs,
    }
    _emit(ctx.report("adaptive", runs, ratios=ratios, extra=extra), as_json)


@bench.command()
@_common
@click.option(
    "--requests",
    "n",
    type=int,
    default=None,
    help="Interactive requests per phase (default: --seconds worth at --rate, at least 8).",
)
@click.option(
    "--rate",
    type=float,
    default=None,
    help="Interactive requests/s (default: a tenth of the engine's one-at-a-time rate).",
)
@click.option(
    "--seconds",
    type=Duration(min_s=1),
    default="30s",
    show_default=True,
    help="Length of each phase (alone, with bulk).",
)
@click.option(
    "--bulk-docs",
    type=int,
    default=5000,
    show_default=True,
    help="Documents in the background bulk job (enough to outlast the phase).",
)
@click.option(
    "--max-in-flight",
    type=int,
    default=500,
    show_default=True,
    help="The bulk job's in-flight window.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1),
    multiple=True,
    help="Engine replicas of the worker (engine.inter_threads); repeat to compare "
    "several in one run [default: the setting's, 2 on a CPU].",
)
@click.pass_obj
def interference(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    n: int | None,
    rate: float | None,
    seconds: float,
    bulk_docs: int,
    max_in_flight: int,
    replicas: tuple[int, ...],
) -> None:
    """Interactive P99 at a fixed rate, alone and with a bulk job saturating the worker.

    With two replicas or more, bulk keeps to all but one (``PriorityGate``).
    """
    from pipeline.bench.interference import BackgroundBulk, drain_bulk, interactive
    from pipeline.bench.report import ratio
    from pipeline.bench.target import bench_worker

    ctx = _Context(settings, pair_id)
    if rate is None:
        translator = ctx.translator()
        rate = round(0.1 / translator.cost_model(ctx.target.entry.pair).seconds(1, 24), 2)
        del translator
    n = n or max(8, round(rate * seconds))
    counts = replicas or (ctx.run_settings.inter_threads,)
    runs: dict[str, Any] = {}
    ratios: dict[str, float | None] = {}
    bulk_extra: dict[str, Any] = {}
    for count in counts:
        suffix = f"_r{count}" if replicas else ""
        env = {"BABELSTREAM_ENGINE__INTER_THREADS": str(count)}
        with (
            bench_worker(ctx.settings, ctx.target, "bench-worker.log", env) as worker,
            tempfile.TemporaryDirectory() as tmp,
        ):
            drain_bulk(ctx.settings, ctx.target, worker)
            alone = interactive(ctx.settings, ctx.target, n, rate, seed=21)
            bulk = BackgroundBulk(ctx.target, bulk_docs, max_in_flight, Path(tmp))
            try:
                bulk.start(warm_segments=min(200, max_in_flight // 2))
                before, started = bulk.completed(), time.monotonic()
                loaded = interactive(ctx.settings, ctx.target, n, rate, seed=22)
                during, elapsed = bulk.completed() - before, time.monotonic() - started
                saturated = bulk.running
            finally:
                bulk.close()
            drain_bulk(ctx.settings, ctx.target, worker)
        runs[f"alone{suffix}"], runs[f"with_bulk{suffix}"] = alone, loaded
        ratios[f"p99_with_bulk_over_alone{suffix}"] = ratio(loaded.p99_ms, alone.p99_ms)
        ratios[f"bulk_segments_per_s{suffix}"] = round(during / elapsed, 2) if elapsed else 0.0
        bulk_extra[f"segments_during_interactive{suffix}"] = during
        bulk_extra[f"saturated_throughout{suffix}"] = saturated
    extra = {
        "bulk": {**bulk_extra, "max_in_flight": max_in_flight},
        "bulk_max_call_s": ctx.settings.batching.bulk_max_call_s,
        "replicas": list(counts),
    }
    _emit(
        ctx.report("interference", runs, ratios=ratios, extra=extra),
        as_json,
    )
