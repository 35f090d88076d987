"""``babelstream drill``: rehearse a chaos scenario by hand against the running stack.

Each scenario (``pipeline/drill/scenarios.py``) starts its own workers on the
stack ``babelstream up`` runs (``--workers``, default ``drill.workers``),
sends paced traffic, injects its fault mid-stream, heals it, and prints the
reconciliation by request id. Exit 0 when every guarantee held, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from pipeline.cli.commands.options import DURATION
from pipeline.kafka.clients import kafka_logs_silenced
from pipeline.settings import Settings


def _scenarios() -> dict[str, Any]:
    from pipeline.drill.scenarios import SCENARIOS

    return SCENARIOS


class DrillGroup(click.Group):
    """``list`` plus one sub-command per scenario."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["list", *_scenarios()]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "list":
            return list_scenarios
        scenario = _scenarios().get(name)
        return None if scenario is None else _scenario_command(name, scenario.summary)


@click.group(cls=DrillGroup)
def drill() -> None:
    """Chaos drills against the running stack: traffic, one fault, every request counted."""


@click.command("list")
def list_scenarios() -> None:
    """The scenarios, one line each."""
    scenarios = _scenarios()
    width = max(map(len, scenarios))
    for name, scenario in scenarios.items():
        click.echo(f"{name:<{width}}  {scenario.summary}")


def _scenario_command(name: str, summary: str) -> click.Command:
    @click.command(name, help=f"{summary}.")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
    @click.option(
        "--workers",
        type=click.IntRange(1, 16),
        help="Workers to start (default: drill.workers, 2).",
    )
    @click.option(
        "--rate",
        type=click.FloatRange(0, min_open=True),
        help="Requests per second (default: drill.rate).",
    )
    @click.option("--seconds", type=DURATION, help="Traffic duration (default: drill.seconds).")
    @click.option(
        "--report",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also append the report as a JSON line to this file.",
    )
    @click.pass_obj
    def command(
        settings: Settings,
        as_json: bool,
        workers: int | None,
        rate: float | None,
        seconds: float | None,
        report: Path | None,
    ) -> None:
        overrides = {
            k: v
            for k, v in {"workers": workers, "rate": rate, "seconds": seconds}.items()
            if v is not None
        }
        settings = settings.model_copy(
            update={"drill": settings.drill.model_copy(update=overrides)}
        )
        outcome = run_drill(settings, name)
        if report is not None:
            from pipeline.drill.scenarios import append_report

            append_report(report, outcome)
        click.echo(json.dumps(outcome.to_dict(), indent=2) if as_json else describe(outcome))
        sys.exit(1 if outcome.problems else 0)

    return command


def run_drill(settings: Settings, name: str) -> Any:
    """Open a drill context on the running stack, run one scenario, always clean up."""
    from pipeline.drill.context import DrillContext
    from pipeline.drill.scenarios import run_scenario, scenario

    chosen = scenario(name)
    # a drill provokes lost connections; kafka-python logs each one at ERROR
    quiet = logging.getLogger().getEffectiveLevel() >= logging.WARNING
    with kafka_logs_silenced() if quiet else contextlib.nullcontext():
        ctx = DrillContext.open(
            settings,
            workers=settings.drill.workers,
            home=settings.drill.home,
            isolate_last=chosen.isolates_worker,
        )
        try:
            return run_scenario(ctx, chosen)
        finally:
            ctx.close()


def describe(report: Any) -> str:
    """The report for people: counts, latencies, timings, what broke."""
    r = report.reconciliation
    timings = ", ".join(f"{k} {v}" for k, v in report.measures.items())
    lines = [
        f"{report.scenario}: {'FAILED' if report.problems else 'ok'} "
        f"({report.wall_s:.0f}s, load {report.load} on {report.cores} cores)",
        f"  acked {r.acked}  answered {r.answered}  missing {len(r.missing)}  "
        f"duplicates {r.duplicates}  error results {r.error_results}  "
        f"failed sends {report.failed_sends}",
        f"  latency P50 {r.p50_ms} ms  P99 {r.p99_ms} ms  P99 during the fault "
        f"{r.p99_during_fault_ms} ms",
        f"  fault {report.fault_s}s; first result after it {report.fault_to_first_result_ms} ms"
        + (f"; {timings}" if timings else ""),
        f"  duplicated ids by results each: {r.duplicate_copies or '-'}; copies by worker: "
        f"{r.duplicates_by_worker or '-'}",
        f"  repeats after the heal by cache level: {report.repeats or '-'}",
    ]
    if report.notes:
        lines.append(f"  notes: {report.notes}")
    if report.checks:
        lines.append(f"  checks: {json.dumps(report.checks)}")
    lines += [f"  PROBLEM: {problem}" for problem in report.problems]
    return "\n".join(lines)
