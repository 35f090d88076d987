"""``babelstream worker``: run the Faust router and translation agents."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import socket
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from pipeline.cli.commands.options import refuse_router_contradiction
from pipeline.contract.digest import files_fingerprint
from pipeline.contract.pairs import Pair
from pipeline.control.priority import HoldFile, PriorityGate
from pipeline.control.residency import ModelResidency
from pipeline.engine.registry import ModelEntry, Registry
from pipeline.errors import ConfigError
from pipeline.settings import Settings
from pipeline.storage.cache import LruCache, RedisCache, TwoLevelCache

if TYPE_CHECKING:
    from pipeline.engine.replicas import ReplicaPlan

    # the worker's modules import Faust: only once a worker starts
    from workers.shell import ServedModel

log = logging.getLogger(__name__)


def _fingerprint(model: ModelEntry) -> str:
    # Cache keys name the exact weights: a rebuilt model never reuses old entries.
    entry = model.any_entry()
    return files_fingerprint(
        [model.model_dir / "model.bin", entry.source_tokenizer, entry.target_tokenizer]
    )


def served_model_id(model: ModelEntry, backend: str) -> str:
    """What cache digests and results name: the model, its weights' fingerprint, and the
    backend when it is not a real engine. The echo engine's answers are its source texts:
    under the real engine's digests they would answer real workers' requests from the
    shared cache."""
    served = f"{model.model_id}@{_fingerprint(model)}"
    return served if backend == "ctranslate2" else f"{served}+{backend}"


def subscription_id(models: list[str], with_router: bool) -> str:
    """A short digest of what a worker consumes (its models, and the ingress or not).

    Part of its static group instance id: a worker restarted with another
    subscription joins as a new member instead of getting the old member's
    assignment back (the group would keep serving the old models until the
    session timed out, and aiokafka refuses an assignment for a topic it did
    not subscribe to).
    """
    text = ",".join(sorted(models)) + ("|router" if with_router else "")
    return hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


def _port(host: str, port: int, setting: str) -> int:
    """``port`` if it can be bound on ``host`` (0: a free one); else a one-line error."""
    with socket.socket() as probe:
        # as the web server binds: a port whose last owner's connections linger
        # in TIME_WAIT is free to reuse
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"{host}:{port} is in use ({exc.strerror}); give this worker its own port "
                f"with {setting}=<port>, or 0 to pick a free one"
            ) from exc
        return int(probe.getsockname()[1])


def _lock_instance(data_dir: Path, instance_id: str) -> IO[str]:
    """Hold a lock on this host for the group instance id (held until the process exits).

    Two live members with one ``group.instance.id`` fence each other in a loop;
    on one host that is caught here, with a clear message.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = (data_dir / f"instance-{instance_id}.lock").open("w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        handle.close()
        raise ConfigError(
            f"another worker on this host already runs as group instance {instance_id!r}; "
            "give each replica its own BABELSTREAM_WORKER__INSTANCE_ID"
        ) from exc
    return handle


@click.command()
@click.option(
    "--models",
    default=None,
    help="Comma-separated model ids to translate with, every pair of each "
    "(default: every model in the registry).",
)
@click.option(
    "--pairs",
    default=None,
    help="Comma-separated pair ids: translate with the models that serve them "
    "(every pair of those models).",
)
@click.option(
    "--router/--no-router",
    default=True,
    show_default=True,
    callback=refuse_router_contradiction,
    help="Also route translate.requests. Run the router in exactly one worker group.",
)
@click.option(
    "--router-only",
    is_flag=True,
    callback=refuse_router_contradiction,
    help="Only route translate.requests (consumer group worker.router_group, "
    "babelstream-router); load no model.",
)
@click.option(
    "--loglevel",
    default="info",
    show_default=True,
    help="Faust's log level (critical, error, warning, info, debug).",
)
@click.pass_obj
def worker(
    settings: Settings,
    models: str | None,
    pairs: str | None,
    router: bool,
    router_only: bool,
    loglevel: str,
) -> None:
    """Run a worker: router + one translation agent per served model's work topic (and its
    bulk topic); the texts of every pair of a model meet in its micro-batches.

    Readiness: GET /babelstream/ready on the web port (200 when serving).
    Prometheus metrics are served at /metrics on observability.metrics_port (9464).
    ``kill -USR1 PID`` logs every thread's stack and every asyncio task (mode's handler).
    """
    from pipeline.detect import SourceDetector
    from pipeline.engine.translator import CTranslate2Translator
    from pipeline.fidelity.service import FidelityService
    from pipeline.observability.metrics import start_metrics_server
    from workers.app import create_app
    from workers.bootstrap import prepare, worker_topics
    from workers.faust_adapter import DrainingWorker
    from workers.shell import WorkerContext

    registry = Registry.load(settings.engine.registry)

    def deployment(pair: Pair) -> str | None:
        model = registry.model_for(pair)
        return model.model_id if model is not None else None

    served, replicas, engine_in_use, plan = _served_models(
        settings, registry, models, pairs, router_only
    )
    if plan is not None:
        settings = _with_call_size(settings, plan)
    w, obs = settings.worker, settings.observability
    web_port = _port(w.web_host, w.web_port, "BABELSTREAM_WORKER__WEB_PORT")
    if obs.metrics_port:
        _port(obs.metrics_host, obs.metrics_port, "BABELSTREAM_OBSERVABILITY__METRICS_PORT")
    names = sorted(m.name for m in served)
    app_id = (
        w.router_group
        if router_only
        else _group_id(names, every_model=models is None and pairs is None)
    )
    with_router = router or router_only
    instance_id = None
    if w.static_membership:
        base = w.instance_id or f"{socket.gethostname()}-{web_port}"
        instance_id = f"{base}-{subscription_id(names, with_router)}"
        _lock = _lock_instance(w.data_dir / app_id, instance_id)
    cache = TwoLevelCache(LruCache(w.l1_cache_size), RedisCache(settings.redis))
    engine = served[0].translator if served else None
    ctx = WorkerContext(
        settings=settings,
        cache=cache,
        gate=PriorityGate(replicas, _engine_hold(settings), settings.engine.bulk_yield_max_s),
        residency=(
            ModelResidency(
                engine,
                idle_s=settings.engine.swap_idle_s,
                max_wait_s=settings.engine.swap_max_wait_s,
            )
            if isinstance(engine, CTranslate2Translator) and engine.budgeted
            else None
        ),
        fidelity=FidelityService.from_settings(settings),
        engine=engine_in_use,
    )
    app, shell = create_app(
        ctx,
        served,
        deployment,
        SourceDetector(registry.languages(), registry.sources_for, settings.detection),
        app_id=app_id,
        with_router=with_router,
        instance_id=instance_id,
        web_port=web_port,
    )
    # the brokers not answering (exit 69) or a wrong topic: one line, from the CLI root
    prepare(settings.kafka, worker_topics(settings, names, app, with_router), w.broker_wait_s)
    if obs.metrics_port:
        start_metrics_server(obs.metrics_host, obs.metrics_port)
    log.warning(
        "worker %s (group %s, instance %s) starting: %s; web http://%s:%d/babelstream/ready; "
        "metrics %s",
        ctx.worker_name,
        app_id,
        instance_id or "dynamic",
        "; ".join(f"{s.model_id} ({s.compute_type}, {s.model.pair_count()} pairs)" for s in served)
        or "router only",
        w.web_host,
        web_port,
        f"http://{obs.metrics_host}:{obs.metrics_port}/metrics" if obs.metrics_port else "off",
    )
    runner = DrainingWorker(
        app, drain=shell.drain, stop_timeout_s=w.stop_timeout_s, loglevel=loglevel
    )
    shell.request_stop = runner.stop_gracefully
    try:
        runner.execute_from_commandline()
    except SystemExit as exc:
        raise SystemExit(shell.exit_code or exc.code) from None


def _served_models(
    settings: Settings,
    registry: Registry,
    models: str | None,
    pairs: str | None,
    router_only: bool,
) -> tuple[list[ServedModel], int, dict[str, Any], ReplicaPlan | None]:
    """The models this worker translates with (every model of the registry unless
    ``--models`` or ``--pairs`` choose), loaded; the engine's replicas; what the engine
    runs on (device, compute types: readiness and ``status`` show it); and on a GPU
    with ``engine.inter_threads`` unset, the measured replicas and call size."""
    from pipeline.engine.capabilities import capabilities_of
    from pipeline.engine.translator import CTranslate2Translator
    from workers.shell import ServedModel

    model_ids, pair_ids = _split(models), _split(pairs)
    if router_only:
        if model_ids or pair_ids:
            raise click.UsageError("--router-only serves no models; drop --models and --pairs")
        return [], 1, {}, None
    chosen = (
        registry.models_for()
        if models is None and pairs is None
        else registry.models_for(model_ids, pair_ids)
    )
    translator = CTranslate2Translator.from_settings(
        settings.engine, models=[m.model_id for m in chosen]
    )
    served = [
        ServedModel(
            model,
            served_model_id(model, settings.engine.backend),
            translator,
            compute_type=translator.compute_type(model.any_entry().pair),
        )
        for model in chosen
    ]
    # each capability a translator lacks has a fallback: readiness names them, so none is silent
    engine = {**translator.in_use(), "capabilities": capabilities_of(translator).describe()}
    return served, translator.inter_threads, engine, translator.replica_plan


def _with_call_size(settings: Settings, plan: ReplicaPlan) -> Settings:
    """``settings`` with the plan's call size, where the worker's settings leave it unset."""
    given = settings.worker.model_fields_set
    update: dict[str, int] = {}
    if "token_budget" not in given:
        update["token_budget"] = plan.token_budget
    if "max_messages" not in given:
        update["max_messages"] = plan.max_messages
    worker = settings.worker.model_copy(update=update)
    return settings.model_copy(update={"worker": worker})


def _group_id(names: list[str], *, every_model: bool) -> str:
    """The consumer group: workers serving different model sets are different groups."""
    if every_model:
        return "babelstream"
    return "babelstream-" + _group_suffix(names)


def _split(values: str | None) -> list[str]:
    return [v.strip() for v in values.split(",") if v.strip()] if values else []


def _group_suffix(models: list[str]) -> str:
    """The consumer group of a worker serving ``models`` (a digest when the names are long)."""
    joined = "-".join(models)
    if len(joined) <= 120:
        return joined
    return hashlib.blake2b(joined.encode(), digest_size=8).hexdigest()


def _engine_hold(settings: Settings) -> HoldFile | None:
    """The engine's hold (``engine.hold_file``), when one is set."""
    path = settings.engine.hold_file
    return HoldFile(path) if path is not None else None
