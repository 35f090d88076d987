"""``babelstream bench replicas``: sentences/s by engine replicas and call size (the GPU plan)."""

from __future__ import annotations

import click

from pipeline.cli.commands.bench import _common, _Context, _emit
from pipeline.cli.commands.options import Duration
from pipeline.settings import Settings


def _counts(value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated whole numbers") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"{value!r}: each at least 1")
    return counts


@click.command()
@_common
@click.option("--replicas", default="1,2,3,4", show_default=True, help="Replica counts.")
@click.option("--budgets", default="4096,16384", show_default=True, help="Call sizes, in tokens.")
@click.option(
    "--seconds",
    type=Duration(min_s=0, min_open=True),
    default="3s",
    show_default=True,
    help="Time per combination.",
)
@click.pass_obj
def replicas(
    settings: Settings,
    pair_id: str,
    as_json: bool,
    replicas: str,
    budgets: str,
    seconds: float,
) -> None:
    """Every replica count with every call size, all replicas calling at once, and the plan
    a GPU worker would choose from them (the fewest replicas, then the smallest calls,
    within 5 % of the fastest). No Kafka needed.
    """
    from pipeline.engine.replicas import choose_plan, sweep
    from pipeline.engine.translator import (
        replica_throughput,
        resolve_device,
        sweep_compute_type,
    )

    ctx = _Context(settings, pair_id, kafka=False)
    entry = ctx.target.entry
    device = resolve_device(ctx.settings.engine.device)
    ctype = sweep_compute_type(entry, device, ctx.settings.engine)
    points = sweep(
        replica_throughput(entry, device, ctype, seconds), _counts(replicas), _counts(budgets)
    )
    plan = choose_plan(points)
    extra = {"device": device, "compute_type": ctype, "plan": plan.to_json()}
    _emit(ctx.report("replicas", {"sweep": points}, extra=extra), as_json)
