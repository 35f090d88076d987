"""``babelstream worker``: run the Faust router and translation agents."""

from __future__ import annotations

import logging

import click

from pipeline.cache import LruCache, RedisCache, TwoLevelCache
from pipeline.commands.options import refuse_router_contradiction
from pipeline.digest import files_fingerprint
from pipeline.engine.registry import PairEntry, Registry
from pipeline.engine.translator import CTranslate2Translator
from pipeline.settings import Settings


def _fingerprint(entry: PairEntry) -> str:
    # Cache keys name the exact weights: a rebuilt model never reuses old entries.
    return files_fingerprint(
        [entry.model_dir / "model.bin", entry.source_tokenizer, entry.target_tokenizer]
    )


@click.command()
@click.option(
    "--pairs", default=None,
    help="Comma-separated pair ids to translate (default: every pair in the registry).",
)
@click.option(
    "--router/--no-router", default=True, show_default=True,
    callback=refuse_router_contradiction,
    help="Also route translate.requests. Run the router in exactly one worker group.",
)
@click.option(
    "--router-only", is_flag=True, callback=refuse_router_contradiction,
    help="Only route translate.requests (consumer group babelstream-router); load no model.",
)
@click.option("--loglevel", default="info", show_default=True,
              help="Faust's log level (critical, error, warning, info, debug).")
@click.pass_obj
def worker(
    settings: Settings, pairs: str | None, router: bool, router_only: bool, loglevel: str
) -> None:
    """Run a worker: router + one translation agent per served pair topic (and bulk topic).

    Prometheus metrics are served at /metrics on observability.metrics_port (9464).
    """
    from faust.worker import Worker

    from pipeline.metrics import start_metrics_server
    from workers.app import ServedPair, WorkerContext, create_app

    registry = Registry.load(settings.engine.registry)
    deployment = {pair_id: entry.model_id for pair_id, entry in registry.pairs.items()}
    if router_only:
        if pairs:
            raise click.UsageError("--router-only serves no pairs; drop --pairs")
        pair_ids: list[str] = []
        compute_types: dict[str, str] = {}
    else:
        pair_ids = [p.strip() for p in pairs.split(",")] if pairs else sorted(deployment)
        translator = CTranslate2Translator.from_settings(settings.engine, pair_ids)
        compute_types = translator.compute_types
    served = [
        ServedPair(
            entry.pair, f"{entry.model_id}@{_fingerprint(entry)}", translator,
            compute_type=translator.compute_types.get(entry.pair.id, "unknown"),
        )
        for entry in registry.entries(pair_ids)
    ]
    cache = TwoLevelCache(LruCache(settings.worker.l1_cache_size), RedisCache(settings.redis))
    ctx = WorkerContext(settings=settings, cache=cache)
    # Workers serving different pair sets are different consumer groups.
    if router_only:
        app_id = "babelstream-router"
    elif not pairs:
        app_id = "babelstream"
    else:
        app_id = "babelstream-" + "-".join(sorted(pair_ids))
    app = create_app(ctx, served, deployment, app_id=app_id, with_router=router or router_only)
    obs = settings.observability
    if obs.metrics_port:
        start_metrics_server(obs.metrics_host, obs.metrics_port)
    logging.getLogger(__name__).info(
        "worker %s serving %s (%s); metrics on %s:%s", ctx.worker_name,
        ", ".join(pair_ids) or "no pairs (router only)",
        ", ".join(f"{p}={c}" for p, c in compute_types.items()),
        obs.metrics_host, obs.metrics_port or "off",
    )
    Worker(app, loglevel=loglevel).execute_from_commandline()
