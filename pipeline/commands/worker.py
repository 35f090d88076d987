"""``babelstream worker``: run the Faust router and translation agents."""

from __future__ import annotations

import logging

import click

from pipeline.cache import LruCache, RedisCache, TwoLevelCache
from pipeline.engine.registry import Registry
from pipeline.engine.translator import CTranslate2Translator
from pipeline.pairs import Pair
from pipeline.settings import Settings


@click.command()
@click.option(
    "--pairs", default=None,
    help="Comma-separated pair ids to translate (default: every pair in the registry).",
)
@click.option(
    "--router/--no-router", default=True, show_default=True,
    help="Also route translate.requests. Run the router in exactly one worker group.",
)
@click.option("--loglevel", default="info", show_default=True)
@click.pass_obj
def worker(settings: Settings, pairs: str | None, router: bool, loglevel: str) -> None:
    """Run a worker: router + one translation agent per served pair topic (and bulk topic)."""
    from faust.worker import Worker

    from workers.app import ServedPair, WorkerContext, create_app

    registry = Registry.load(settings.engine.registry)
    deployment = {pair_id: entry.model_id for pair_id, entry in registry.pairs.items()}
    pair_ids = [p.strip() for p in pairs.split(",")] if pairs else sorted(deployment)
    translator = CTranslate2Translator.from_settings(settings.engine, pair_ids)
    served = [
        ServedPair(Pair.parse(pair_id), translator.model_ids[pair_id], translator)
        for pair_id in pair_ids
    ]
    cache = TwoLevelCache(LruCache(settings.worker.l1_cache_size), RedisCache(settings.redis))
    ctx = WorkerContext(settings=settings, cache=cache)
    # Workers serving different pair sets are different consumer groups.
    app_id = "babelstream" if not pairs else "babelstream-" + "-".join(sorted(pair_ids))
    app = create_app(ctx, served, deployment, app_id=app_id, with_router=router)
    logging.getLogger(__name__).info(
        "worker %s serving %s (%s)", ctx.worker_name, ", ".join(pair_ids),
        ", ".join(f"{p}={c}" for p, c in translator.compute_types.items()),
    )
    Worker(app, loglevel=loglevel).execute_from_commandline()
