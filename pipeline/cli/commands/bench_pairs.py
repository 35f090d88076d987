"""``babelstream bench pairs``: the same load over 1 to 64 pairs of one model (and more)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import click

from pipeline.bench.model import BENCH_PAIR
from pipeline.settings import Settings


@click.command("pairs")
@click.option(
    "--pair",
    "pair_id",
    default=BENCH_PAIR.id,
    show_default=True,
    help="A pair of the model to spread the load over (its entry is copied per pair).",
)
@click.option(
    "--steps",
    default="1,4,16,64",
    show_default=True,
    help="Pair counts, comma-separated: one step each.",
)
@click.option(
    "--requests",
    "n",
    type=click.IntRange(1),
    default=600,
    show_default=True,
    help="Requests of each step (the same texts, spread over its pairs).",
)
@click.option(
    "--multilingual/--no-multilingual",
    default=True,
    show_default=True,
    help="A step on the model of `models build-bench --languages` (when built): ready "
    "time, topics and the load over pairs drawn from all of its pairs.",
)
@click.option(
    "--fleet",
    type=click.IntRange(0),
    default=4,
    show_default=True,
    help="A step of this many bilingual models (0: none), served under a budget of "
    "--budget loaded models, so models are loaded and unloaded in turn.",
)
@click.option(
    "--budget",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Models loaded at once in the --fleet step (engine.max_loaded_models).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where the PNG goes [default: var/bench/pairs.png].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report on one line.")
@click.pass_obj
def pairs(
    settings: Settings,
    pair_id: str,
    steps: str,
    n: int,
    multilingual: bool,
    fleet: int,
    budget: int,
    plot_path: Path | None,
    as_json: bool,
) -> None:
    """Cost as traffic spreads over pairs: throughput, mean engine batch, topics,
    partitions, worker memory and ready time per step, as JSON plus a plot."""
    from pipeline.bench.pairs import measure_step, sample_pairs, spread_registry
    from pipeline.bench.plot import plot_pairs
    from pipeline.bench.report import BenchReport, Machine, RunSettings, ratio
    from pipeline.bench.target import resolve_target
    from pipeline.bench.workload import make_texts
    from pipeline.cli.commands.models import multilingual_registry
    from pipeline.kafka.reachability import require_kafka

    machine = Machine.current()
    require_kafka(settings.kafka)
    target = resolve_target(settings, pair_id)
    try:
        counts = [int(c) for c in steps.split(",") if c.strip()]
    except ValueError:
        raise click.BadParameter(f"{steps!r}: pair counts such as 1,4,16,64") from None
    texts = make_texts(n, 0.0, seed=11)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as work:
        base = Path(work)
        for i, count in enumerate(counts):
            name = f"pairs-{count}" if counts.index(count) == i else f"pairs-{count}-{i}"
            path = base / f"{name}.toml"
            chosen = spread_registry(path, target.entry, count, run=name)
            results.append(measure_step(settings, name, path, chosen, texts))
        # The first step again, on topics of its own: these cores drift by 10-25 % over a
        # run, so the ratios are against the mean of the first step before and after.
        path = base / "again.toml"
        chosen = spread_registry(path, target.entry, counts[0], run="again")
        again = measure_step(settings, f"pairs-{counts[0]}-again", path, chosen, texts)
        results.append(again)
        ml = multilingual_registry(settings)
        if multilingual and ml.exists():
            drawn = sample_pairs(ml, max(counts))
            results.append(measure_step(settings, "multilingual", ml, drawn, texts))
        if fleet:
            path = base / "fleet.toml"
            chosen = spread_registry(path, target.entry, 2 * fleet, models=fleet, run="fleet")
            results.append(
                measure_step(
                    settings,
                    f"fleet-{fleet}-budget-{budget}",
                    path,
                    chosen,
                    texts,
                    env={"BABELSTREAM_ENGINE__MAX_LOADED_MODELS": str(budget)},
                )
            )
    spread = [r for r in results if r.name.startswith("pairs-") and r is not again]
    fleet_step = next((r for r in results if r.name.startswith("fleet-")), None)
    first, last = spread[0], spread[-1]

    def against_first(
        value: float | None, before: float | None, after: float | None
    ) -> float | None:
        reference = (before + after) / 2 if before is not None and after is not None else None
        return ratio(value, reference)

    plot = plot_pairs(
        [r.pairs for r in spread],
        [r.load.throughput_rps for r in spread],
        [r.mean_engine_batch for r in spread],
        plot_path or settings.stack.home / "bench" / "pairs.png",
    )
    report = BenchReport(
        "pairs",
        machine,
        RunSettings.of(settings, target.entry),
        {r.name: r.load for r in results},
        ratios={
            f"throughput_{last.pairs}_vs_{first.pairs}": against_first(
                last.load.throughput_rps, first.load.throughput_rps, again.load.throughput_rps
            ),
            f"engine_batch_{last.pairs}_vs_{first.pairs}": against_first(
                last.mean_engine_batch, first.mean_engine_batch, again.mean_engine_batch
            ),
            # how far the machine moved between the first step and its repeat
            "first_again_over_first": ratio(again.load.throughput_rps, first.load.throughput_rps),
            # models taking turns under a budget, against one model at equal work (target
            # >= 0.9, with at most models + 2 loads over the run)
            **(
                {
                    f"fleet_{fleet}_vs_{first.pairs}": against_first(
                        fleet_step.load.throughput_rps,
                        first.load.throughput_rps,
                        again.load.throughput_rps,
                    )
                }
                if fleet_step is not None
                else {}
            ),
        },
        extra={
            "steps": [
                {k: v for k, v in dataclasses.asdict(r).items() if k != "load"} for r in results
            ],
            "plot": str(plot),
        },
    )
    click.echo(report.to_json(indent=None if as_json else 2))
