"""One typed settings object for the whole pipeline.

Read once at the edge (CLI, worker start-up) from the environment
(``BABELSTREAM_<SECTION>__<FIELD>``) and an optional TOML file
(``BABELSTREAM_CONFIG``), then passed down explicitly. Nothing below the
edge reads the environment.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pipeline.contract.pairs import (
    RESULTS_TOPIC,
    SLA_LATE_TOPIC,
    SLA_TOPIC,
    TICKS_TOPIC,
    TOPIC_TENANT_PATTERN,
    Pair,
)
from pipeline.errors import ConfigError, ContractError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ENV_PREFIX = "BABELSTREAM_"
# names the optional TOML file read under the environment
CONFIG_VARIABLE = ENV_PREFIX + "CONFIG"


SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
# weight types CTranslate2's converters write
Quantization = Literal["int8", "int8_float16", "int8_float32", "float16", "float32"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Section):
    # the brokers, host:port[,host:port...]
    bootstrap_servers: str = "127.0.0.1:9092"
    # every topic the project creates (work topics, results, changelogs, SLA);
    # 1 / 1 on a single broker, 3 / 2 on a cluster
    replication_factor: int = Field(1, ge=1)
    # acknowledged writes need this many in-sync replicas (with acks=all)
    min_insync_replicas: int = Field(1, ge=1)
    # partitions of translate.requests, the topic producers write to
    ingress_partitions: int = Field(6, ge=1)
    # partitions of each model's work topics (interactive and bulk)
    work_partitions: int = Field(4, ge=1)
    # partitions of translate.results
    results_partitions: int = Field(4, ge=1)
    # partitions of translate.dlq
    dlq_partitions: int = Field(1, ge=1)
    # partitions of translate.sla, the SLA job's windows
    sla_partitions: int = Field(1, ge=1)
    # how long a Kafka client waits for a broker's answer to one request
    request_timeout_ms: int = Field(30_000, ge=1000)
    # the client.id every Kafka client sends (broker logs and quotas)
    client_id: str = "babelstream"
    # how long a command waits for a TCP connection to a broker (or a spark:// master)
    # before it says the service is not reachable, instead of a client's long timeout
    connect_timeout_s: float = Field(3.0, gt=0)
    # how long closing a command's producer may wait for records still buffered
    producer_close_timeout_s: float = Field(10.0, gt=0)
    # translate.cancel (compacted) and translate.dlq.replayed (compacted replay markers)
    cancel_partitions: int = Field(1, ge=1)
    # partitions of translate.dlq.replayed
    replay_marker_partitions: int = Field(1, ge=1)
    # translate.quarantine (compacted): records no worker may process again
    quarantine_partitions: int = Field(1, ge=1)
    # Security (pipeline/kafka/clients.py applies it to every client). SASL_SSL with
    # SCRAM-SHA-512 is what `babelstream up --secure` serves; SSL alone authenticates
    # with a client certificate (ssl_certfile) when the listener asks for one.
    security_protocol: SecurityProtocol = "PLAINTEXT"
    # the SASL mechanism (security_protocol SASL_SSL or SASL_PLAINTEXT)
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    # the SASL user; None: no SASL
    sasl_username: str | None = None
    # the SASL user's password
    sasl_password: SecretStr | None = None
    # PEM files: the CA that signed the brokers' certificates; the client's
    # certificate chain (may hold its private key too: Spark needs them in one file)
    ssl_cafile: Path | None = None
    # the client's certificate chain (PEM), for a listener that asks for one
    ssl_certfile: Path | None = None
    # the client certificate's private key (PEM); None: in ssl_certfile
    ssl_keyfile: Path | None = None
    # the password of ssl_keyfile, if it is encrypted
    ssl_key_password: SecretStr | None = None
    # whether a broker's certificate must name the host connected to
    ssl_check_hostname: bool = True
    # worker heartbeats (translate.ticks) and late results (translate.sla.late)
    ticks_partitions: int = Field(1, ge=1)
    # partitions of translate.sla.late
    sla_late_partitions: int = Field(1, ge=1)
    # heartbeats are worth only their latest values
    ticks_retention_ms: int = Field(3_600_000, ge=60_000)
    # Spark's Kafka source (SLA and bulk jobs): how long the broker holds a fetch
    # that finds no new records. A task reading up to the log's end (every
    # micro-batch of a job that keeps up) otherwise waits the consumer's
    # 500 ms default (docs: concepts/sla.md)
    spark_fetch_max_wait_ms: int = Field(10, ge=0)
    # the folder of the Spark jobs' Kafka connector jars, filled when an image is built
    # (python -m pipeline.spark_connector DIR); None: fetched by Maven at first use into
    # var/jars/ (a development checkout)
    spark_jars_dir: Path | None = None

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"min_insync_replicas ({self.min_insync_replicas}) exceeds "
                f"replication_factor ({self.replication_factor}): no write could succeed"
            )
        if self.security_protocol.startswith("SASL_") and not (
            self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_username and sasl_password"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile is set without ssl_certfile")
        return self

    @property
    def uses_tls(self) -> bool:
        """True when connections are encrypted (SSL or SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")


class RedisSettings(_Section):
    # the L2 cache, quotas and glossaries; rediss:// switches TLS on
    url: str = "redis://127.0.0.1:6379/0"
    # the Redis password (AUTH); None: no AUTH
    password: SecretStr | None = None
    # L2 keys are <key_prefix>:v<cache_version>:<digest>; a new version drops every entry
    key_prefix: str = "bs"
    # raise it to drop every L2 entry at once (after a model changes)
    cache_version: int = 1
    # L2 entry lifetime
    ttl_s: int = Field(7 * 24 * 3600, ge=1)
    # a Redis call slower than this fails (a cache miss, counted)
    socket_timeout_s: float = Field(0.5, gt=0)
    # ACL user (None: the default user, i.e. plain `requirepass` when password is set)
    username: str | None = None
    # TLS is switched on by the URL scheme (rediss://); these are PEM files
    ssl_ca_certs: Path | None = None
    # the client's certificate (PEM), for a server that asks for one
    ssl_certfile: Path | None = None
    # the client certificate's private key (PEM)
    ssl_keyfile: Path | None = None
    # whether the server's certificate must name the host connected to
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> RedisSettings:
        tls_files = (self.ssl_ca_certs, self.ssl_certfile, self.ssl_keyfile)
        if any(tls_files) and not self.uses_tls:
            raise ValueError("Redis TLS files are set but the URL is not rediss://")
        return self

    @property
    def uses_tls(self) -> bool:
        """True for a ``rediss://`` URL."""
        return self.url.startswith("rediss://")


class StackSettings(_Section):
    """Where the local dev stack keeps jars, data and logs."""

    # jars, data and logs of the local stack
    home: Path = PROJECT_ROOT / "var"
    # the Kafka release the stack fetches and runs
    kafka_version: str = "3.9.1"
    # the client port of node 0
    kafka_port: int = 9092
    # the controller port of node 0
    kafka_controller_port: int = 9093
    # each Kafka node's JVM heap (-Xmx)
    kafka_heap: str = "512m"
    # the Redis server's port
    redis_port: int = 6379
    # how long `babelstream up` waits for a service to answer
    start_timeout_s: float = Field(120.0, gt=0)
    # how long `babelstream down` waits before it kills a service
    stop_timeout_s: float = Field(30.0, gt=0)
    # `babelstream status`: how long each HTTP probe (worker readiness, dashboard) may take
    probe_timeout_s: float = Field(1.0, gt=0)
    # Kafka nodes (combined broker + controller each); 3 gives a cluster that
    # survives one node (needs kafka.replication_factor 3, min_insync_replicas 2)
    brokers: int = Field(1, ge=1, le=9)
    # node i (from 0) listens on <base port> + i * node_port_step
    node_port_step: int = Field(10, ge=1)
    # secure mode: mutual-TLS listener (inter-broker traffic, SSL clients); the
    # client port (kafka_port) then speaks SASL_SSL, Redis speaks TLS on redis_port
    kafka_ssl_port: int = 9094
    # TLS and SASL on every listener (`babelstream up --secure`)
    secure: bool = False
    # None: <home>/jars (a temporary stack home can share the fetched jars)
    jars_dir: Path | None = None

    @model_validator(mode="after")
    def _distinct_ports(self) -> StackSettings:
        ports = [self.redis_port]
        for node in range(self.brokers):
            offset = node * self.node_port_step
            ports += [self.kafka_port + offset, self.kafka_controller_port + offset]
            if self.secure:
                ports.append(self.kafka_ssl_port + offset)
        taken = sorted({p for p in ports if ports.count(p) > 1})
        if taken:
            raise ValueError(
                f"stack ports collide ({', '.join(map(str, taken))}): set "
                "kafka_port, kafka_controller_port, kafka_ssl_port, "
                "node_port_step and redis_port apart"
            )
        return self


class LimitSettings(_Section):
    """Deployment limits beyond the schema: the router dead-letters a request over them
    (reason limit_exceeded), and the client and CLI refuse it before sending."""

    # a request's text, in UTF-8 bytes
    max_text_bytes: int = Field(16 * 1024, ge=1)
    # the range a request's timeout_ms must fall in
    min_timeout_ms: int = Field(100, ge=1)
    # the longest timeout_ms a request may ask for
    max_timeout_ms: int = Field(3_600_000, ge=1)
    # the deadline of a request that gives none
    default_timeout_ms: int = Field(30_000, ge=1)
    # a request's metadata, serialised as JSON
    max_metadata_bytes: int = Field(4 * 1024, ge=0)


class EngineSettings(_Section):
    # the model registry: each model once, the pairs it serves, tokenizers, prefixes
    # (models/registry.toml)
    registry: Path = PROJECT_ROOT / "models" / "registry.toml"
    # auto (a GPU when CTranslate2 sees one), cpu or cuda
    device: str = "auto"
    # ctranslate2: the models translate. echo: each text comes back as it was sent and the
    # model, loaded, is never called: what a run then costs is the pipeline's own
    # (`babelstream bench hotpath`). Never for serving.
    backend: Literal["ctranslate2", "echo"] = "ctranslate2"
    # model replicas (CTranslate2 inter_threads): engine calls that run at once. Unset:
    # 2 on a CPU of two cores or more, 1 on a GPU (threads()). With 2 or more a
    # worker's calls run side by side (1.9x one replica's throughput on 2 cores) and
    # bulk gets all but one, so a bulk call never delays interactive work (docs: performance).
    inter_threads: int | None = Field(None, ge=1)
    # A bulk call does not start while interactive work holds or waits for the engine
    # (beside it, it takes the cores that interactive calls and the event loop need), up
    # to this long: a bulk call that has waited longer takes its share anyway, so
    # saturating interactive traffic slows bulk work but never stops it.
    bulk_yield_max_s: float = Field(1.0, ge=0)
    # CTranslate2 threads per replica. Unset: all cores but one, which stays with the
    # event loop and Kafka clients, shared among the replicas (at least one each).
    # Oversubscribing (0 = CTranslate2's default, or all cores) made batch-1 calls ~10x
    # slower on 2 cores (docs: concepts/batching.md).
    intra_threads: int | None = Field(None, ge=0)
    # beam search width (1: greedy)
    beam_size: int = Field(1, ge=1)
    # overrides every registry entry's compute_type when set (auto, int8, float32, ...)
    compute_type: str | None = None
    # CTranslate2 max_batch_size, counted in tokens (batch_type="tokens")
    max_batch_tokens: int = Field(4096, ge=1)
    # Measure each model at start-up: the fastest compute type when it is auto, and
    # the call-cost model batching cuts by; cached per model and machine in
    # profile_cache (pipeline/engine/profile.py). Off: auto = int8 (CPU) /
    # int8_float16 (GPU) and a rough default cost model.
    profile: bool = True
    # where the start-up measurements are kept, per model and machine
    profile_cache: Path = PROJECT_ROOT / "var" / "engine" / "profiles.json"
    # compute types are timed on calls of (sequences, tokens) for profile_seconds each
    profile_shape: tuple[int, int] = (32, 24)
    # how long each compute type is timed at start-up
    profile_seconds: float = Field(2.0, gt=0)
    # Models resident in one worker at once, by count and by bytes (model.bin sizes).
    # Unset: every model the worker serves is loaded at start. Set: a model is loaded
    # on first use and the least recently used idle one unloaded when the budget needs
    # room (a request for a cold model waits for its load).
    max_loaded_models: int | None = Field(None, ge=1)
    # the byte budget of resident models (their model.bin sizes together)
    max_loaded_bytes: int | None = Field(None, ge=1)
    # Under a budget, a batch for a model that is not loaded waits for a loaded one to go
    # idle (no batch of it for swap_idle_s: a model with a backlog has its next batch
    # within milliseconds, so its backlog drains before it is swapped out), at most
    # swap_max_wait_s; then the loaded model quiet the longest makes room anyway
    # (pipeline/control/residency.py).
    # A shorter bound evens out the waits of models that are all busy at once, at the
    # cost of more loads (bench pairs' fleet step: docs/performance).
    swap_idle_s: float = Field(0.25, ge=0)
    # the longest a batch for a model not loaded waits for a loaded one to go idle
    swap_max_wait_s: float = Field(10.0, ge=0)
    # texts kept tokenised (per pair, least recently used out): the fair-share agent
    # counts a request's tokens as it is fetched, and its engine call then reuses them;
    # 0: every text is tokenised at each use
    prepared_texts: int = Field(4096, ge=0)
    # While this file exists, no engine call starts: work is read ahead and waits, then
    # runs in priority order once the file is removed. For tests and drills that must
    # control timing (what arrives meanwhile meets in the same calls). Unset: no hold.
    hold_file: Path | None = None
    # benchmark models (`babelstream models build-bench`) are registered here
    bench_registry: Path = PROJECT_ROOT / "var" / "models" / "bench" / "registry.toml"

    def threads(self, device: str) -> tuple[int, int]:
        """Replicas and threads per replica on ``device`` (``cpu``, ``cuda``), unset ones filled."""
        cores = os.cpu_count() or 1
        replicas = self.inter_threads or (1 if device == "cuda" or cores < 2 else 2)
        per_replica = (
            self.intra_threads
            if self.intra_threads is not None
            else max(1, (cores - 1) // replicas)
        )
        return replicas, per_replica


class WorkerSettings(_Section):
    # a micro-batch: at most this many requests from one topic ...
    max_messages: int = Field(64, ge=1)
    # ... taken within this long
    max_wait_s: float = Field(0.02, gt=0)
    # micro-batches of one agent in flight: the next starts once the last is done with
    # the engine, so its lookups and engine calls overlap the last one's publishing
    # (workers/inflight.py); 1: one at a time, start to end. Unset: one more than the
    # engine's replicas (in_flight()), so every replica has a batch to compute while
    # another batch publishes
    batches_in_flight: int | None = Field(None, ge=1)
    # padded tokens per engine sub-batch (interactive work)
    token_budget: int = Field(4096, ge=1)
    # Bulk batches are kept small: a running engine call is never interrupted,
    # so their size bounds how long interactive work waits behind bulk work.
    bulk_max_messages: int = Field(16, ge=1)
    # padded tokens per bulk engine call
    bulk_token_budget: int = Field(1024, ge=1)
    # entries of the in-process LRU (L1) cache
    l1_cache_size: int = Field(50_000, ge=0)
    # translations an agent's batches finished lately, by digest: they answer a batch that
    # looked the dedup window up before the batch that translated its text stored it there
    # (pipeline.steps.in_flight.InFlightTexts)
    recent_translations: int = Field(4096, ge=1)
    # how long the dedup window (a changelog-backed Faust table) remembers a translation
    dedup_window_s: float = Field(300.0, gt=0)
    # the worker's web server (readiness, stats); 0 picks a free port (and logs it)
    web_port: int = Field(6066, ge=0, le=65535)
    # the address the worker's web server binds
    web_host: str = "127.0.0.1"
    # Faust's local table state, per consumer group and instance id
    data_dir: Path = PROJECT_ROOT / "var" / "faust"
    # Static membership (KIP-345): a replica restarted within the session timeout
    # gets its partitions back without a rebalance. Each live replica needs its
    # own stable id (a StatefulSet pod name); default: <hostname>-<web port>.
    static_membership: bool = True
    # this replica's group.instance.id; None: <hostname>-<web port>
    instance_id: str | None = None
    # the consumer group of `worker --router-only` (one group routes translate.requests)
    router_group: str = Field("babelstream-router", min_length=1)
    # How long the group waits for a silent member before moving its partitions
    # (the failover time after a crash); heartbeats go out every third of it.
    session_timeout_s: float = Field(10.0, ge=6.0, le=300.0)
    # offsets of finished batches are committed at most this often
    commit_interval_s: float = Field(0.5, gt=0)
    # how long a look at a partition's log (does a skipped range hold records?) may take
    log_probe_timeout_s: float = Field(5.0, gt=0)
    # a produced record not acknowledged within this is a transient fault
    produce_timeout_s: float = Field(30.0, gt=0)
    # transient faults: backoff between attempts of a batch, and for how long in all
    # before the worker exits non-zero (nothing committed, so nothing is lost)
    retry_initial_s: float = Field(0.5, gt=0)
    # the longest backoff between two attempts
    retry_max_s: float = Field(15.0, gt=0)
    # how long a failing batch is retried before the worker exits 75
    retry_budget_s: float = Field(300.0, gt=0)
    # at start: how long to wait for the brokers, then for every topic to be visible
    broker_wait_s: float = Field(120.0, ge=0)
    # SIGTERM: finish the running batch, publish, commit and exit within this bound
    stop_timeout_s: float = Field(30.0, gt=0)
    # cancelled request / job ids a worker remembers (each for limits.max_timeout_ms at most)
    cancel_max_entries: int = Field(1_000_000, ge=1)
    # a batch waits at most this long at start for the worker to have read the cancel
    # and quarantine topics to their end (then it is retried as a transient fault)
    control_ready_wait_s: float = Field(10.0, gt=0)
    # A known-good text: when a step fails a batch with a fault it does not classify,
    # a canary request of it runs the same steps to tell a poison request from broken
    # infrastructure (pipeline/steps/batch_runner.py). canary_texts: per source language.
    canary_text: str = Field("Hello.", min_length=1)
    # source language -> canary text (others use canary_text)
    canary_texts: dict[str, str] = {}
    # how often the worker checks its group: that its consumer still takes part (else it
    # exits 75), and that every partition of what it consumes has a member holding it
    # (else it is not ready: a static member of another subscription may hold its share)
    group_check_s: float = Field(5.0, gt=0)
    # a batch failing (and retried) for longer than this makes the worker not ready,
    # with the agent, attempts, exception class and first record on its readiness page
    stall_report_s: float = Field(30.0, gt=0)
    # one heartbeat per worker to translate.ticks (pipeline.sla.ticks.TickSource), so the SLA
    # job's windows close while pairs are quiet; 0 disables it
    tick_interval_s: float = Field(5.0, ge=0)

    def in_flight(self, replicas: int) -> int:
        """Micro-batches of one agent in flight, beside an engine of ``replicas``."""
        return self.batches_in_flight or replicas + 1

    def canary_for(self, source_lang: str) -> str:
        """The canary text of a source language (``canary_texts``, else ``canary_text``)."""
        return self.canary_texts.get(source_lang, self.canary_text)


SlaSink = Literal["kafka", "parquet", "console"]
_V = TypeVar("_V")


def _check_pair_ids(value: dict[str, _V]) -> dict[str, _V]:
    """A settings map keyed by pair id: every key must parse as one."""
    for pair_id in value:
        try:
            Pair.parse(pair_id)
        except ContractError as exc:
            raise ValueError(str(exc)) from exc
    return value


class SloObjectives(_Section):
    """Service-level objectives one window is held to; None: not an objective."""

    # at most this P95 latency, ms
    p95_ms: float | None = Field(None, ge=0)
    # at most this P99 latency, ms
    p99_ms: float | None = Field(None, ge=0)
    # at most this share of results timed out (or exceeded the latency threshold);
    # also the error budget the burn rates are measured against
    timeout_ratio: float | None = Field(None, gt=0, le=1)
    # at most this share of results failed
    error_ratio: float | None = Field(None, ge=0, le=1)
    # at least this many results per second of the window (bulk throughput)
    min_throughput_per_s: float | None = Field(None, ge=0)

    def over(self, other: SloObjectives) -> SloObjectives:
        """These objectives, with the ones this leaves unset taken from ``other``."""
        return other.model_copy(update=self.model_dump(exclude_none=True))

    def targets(self) -> dict[str, float]:
        """Objective name -> target, for the ones that are set."""
        return {name: float(value) for name, value in self.model_dump(exclude_none=True).items()}


class InteractiveObjectives(SloObjectives):
    """Defaults for interactive work (a setting left out keeps its default)."""

    p95_ms: float | None = Field(1000.0, ge=0)
    p99_ms: float | None = Field(2500.0, ge=0)
    timeout_ratio: float | None = Field(0.01, gt=0, le=1)
    error_ratio: float | None = Field(0.01, ge=0, le=1)


class BulkObjectives(SloObjectives):
    """Defaults for bulk work: completion within the bulk threshold, not per-request latency."""

    timeout_ratio: float | None = Field(0.01, gt=0, le=1)
    error_ratio: float | None = Field(0.01, ge=0, le=1)


class SlaSettings(_Section):
    """Defaults of the Spark SLA job (``babelstream sla``); durations in seconds."""

    # the topic of results the job reads
    source_topic: str = RESULTS_TOPIC
    # the topic the job writes its windows to
    sink_topic: str = SLA_TOPIC
    # the length of a window
    window_s: float = Field(5.0, gt=0)
    # None: tumbling windows (slide = window)
    slide_s: float | None = Field(None, gt=0)
    # how late a result may arrive and still count in its window
    watermark_s: float = Field(30.0, ge=0)
    # how often a micro-batch runs
    trigger_s: float = Field(1.0, gt=0)
    # latency above a pair's threshold counts as a timeout (pair id -> ms)
    default_threshold_ms: int = Field(5000, ge=0)
    # pair id -> its threshold; others get default_threshold_ms
    thresholds_ms: dict[str, Annotated[int, Field(ge=0)]] = {}
    # percentile_approx accuracy: rank error at most count / accuracy
    percentile_accuracy: int = Field(10_000, ge=1)
    # where the windows go: kafka (sink_topic), parquet (history_dir), console
    sinks: tuple[SlaSink, ...] = Field(("kafka", "parquet", "console"), min_length=1)
    # Spark's checkpoint: offsets and state, to resume where the job stopped
    checkpoint_dir: Path = PROJECT_ROOT / "var" / "sla" / "checkpoint"
    # the Kafka sinks' transactional id, also the group holding their batch marks;
    # None: derived from checkpoint_dir (one per checkpoint, the same across restarts)
    transactional_id: str | None = None
    # the Parquet history of windows (`sla report` reads it)
    history_dir: Path = PROJECT_ROOT / "var" / "sla" / "history"
    # where a job without a checkpoint starts reading
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    # at most this many records per micro-batch; None: all available
    max_offsets_per_trigger: int | None = Field(None, ge=1)
    # the Spark master: local[N] or spark://host:port
    master: str = "local[2]"
    # the Spark driver's memory (spark.driver.memory)
    driver_memory: str = "1g"
    # the JVM options of the driver and the executors (in local mode, one JVM). The
    # parallel collector: the job's state stores and shuffles churn short-lived objects,
    # and in `bench sla` it made the full job 10-25 % faster than the default G1
    java_options: str = "-XX:+UseParallelGC"
    # one state store per partition and stateful operator, each committed every
    # micro-batch: on the default local[2] one partition beat two by 8-20 % in
    # `bench sla` (the source scan still uses both cores); on a cluster, about its
    # executors' cores (docs: concepts/sla.md)
    shuffle_partitions: int = Field(1, ge=1)
    # worker heartbeats read with the results (advance event time while pairs are quiet)
    ticks_topic: str = TICKS_TOPIC
    # results that arrived after their window closed, and their Parquet history
    late_topic: str = SLA_LATE_TOPIC
    # the Parquet history of late results
    late_history_dir: Path = PROJECT_ROOT / "var" / "sla" / "late"
    # count each request_id once within the lateness (dropDuplicatesWithinWatermark)
    dedup: bool = True
    # bulk results (job_id set) are held to this threshold, not the interactive one
    bulk_threshold_ms: int = Field(3_600_000, ge=0)
    # the objectives of interactive results (job_id unset)
    objectives: InteractiveObjectives = InteractiveObjectives()
    # the objectives of bulk results (job_id set)
    bulk_objectives: BulkObjectives = BulkObjectives()
    # pair id -> overrides of the interactive objectives (a field left out keeps its value)
    pair_objectives: dict[str, SloObjectives] = {}
    # KLL sketch size of the per-window latency sketches in the Parquet history
    # (normalized rank error about 1.33% at 200, 0.28% at 1000; bigger k, bigger files);
    # None: no sketches (`sla report` then has no percentiles)
    sketch_k: int | None = Field(200, ge=8, le=65535)
    # the driver binds here in local mode (loopback unless a setting says otherwise)
    driver_host: str = "127.0.0.1"
    # "hdfs" (Spark's default, in memory) or "rocksdb" (state off-heap, on local disk)
    state_store: Literal["hdfs", "rocksdb"] = "hdfs"

    @field_validator("thresholds_ms", "pair_objectives")
    @classmethod
    def _pair_ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_pair_ids(value)

    @model_validator(mode="after")
    def _slide_within_window(self) -> SlaSettings:
        if self.slide_s is not None and self.slide_s > self.window_s:
            raise ValueError(f"slide ({self.slide_s}s) must not exceed window ({self.window_s}s)")
        return self

    def threshold_ms(self, pair_id: str) -> int:
        """The SLA latency threshold of one pair."""
        return self.thresholds_ms.get(pair_id, self.default_threshold_ms)

    def objectives_for(self, series: str, priority: str) -> SloObjectives:
        """The objectives of one series (pair id or "unsupported") and priority class."""
        if priority == "bulk":
            return self.bulk_objectives
        override = self.pair_objectives.get(series)
        return override.over(self.objectives) if override else self.objectives


class BulkSettings(_Section):
    """Bulk document jobs (``babelstream bulk``)."""

    # job state (manifest + completed segment results) lives in <state_dir>/<job_id>/
    state_dir: Path = PROJECT_ROOT / "var" / "bulk"
    # segments published but not yet answered; bounds Kafka backlog and memory
    max_in_flight: int = Field(2000, ge=1)
    # segments per producer flush
    submit_chunk: int = Field(250, ge=1)
    # request deadline relative to submission; bulk waits behind interactive work
    timeout_ms: int = Field(3_600_000, ge=100, le=3_600_000)
    # give up (state kept, rerun resumes) when no result arrives for this long
    stall_timeout_s: float = Field(600.0, gt=0)
    # Spark bulk jobs (`babelstream bulk spark-submit | spark-assemble`)
    spark_master: str = "local[2]"
    # the Spark driver's memory (spark.driver.memory)
    spark_driver_memory: str = "1g"
    # spark.sql.shuffle.partitions of the bulk jobs
    spark_shuffle_partitions: int = Field(4, ge=1)
    # input rows plus translations held for in-order assembly; reading pauses above it
    window_bytes: int = Field(32 << 20, ge=1)


class ObservabilitySettings(_Section):
    """Traces and Prometheus metrics.

    The OTLP trace exporter is configured by OpenTelemetry's own
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and friends), not here.
    """

    # the OpenTelemetry service.name of every span
    service_name: str = "babelstream"
    # print finished spans to stderr (debugging)
    console_exporter: bool = False
    # append finished spans as JSON lines to this file (tests, debugging)
    span_file: Path | None = None
    # workers serve Prometheus /metrics here; 0 disables the endpoint
    metrics_port: int = Field(9464, ge=0, le=65535)
    # the address /metrics binds
    metrics_host: str = "127.0.0.1"
    # how often workers sample consumer lag and cache errors
    sample_interval_s: float = Field(5.0, gt=0)


class DashboardSettings(_Section):
    """The live SLA page (``babelstream dashboard``)."""

    # the address the dashboard binds
    host: str = "127.0.0.1"
    # the dashboard's port; 0 picks a free one
    port: int = Field(8050, ge=0, le=65535)
    # None: the SLA job's sink topic (sla.sink_topic)
    topic: str | None = None
    # on start, replay windows produced this long ago
    history_s: float = Field(3600.0, ge=0)
    # windows kept (and charted) per pair
    max_windows: int = Field(720, ge=1)


class TenantSettings(_Section):
    """Per-tenant fair share and quotas inside a pair (no tenant counts as ``default``)."""

    # deficit round robin over the tenants of the fetched events; off: first come first served
    fair_share: bool = True
    # characters a tenant of weight 1 may add to one engine round; smaller rounds bound how
    # long a steady tenant waits behind a flooding one, larger rounds batch more
    quantum_chars: int = Field(128, ge=1)
    # fair-share weight of tenants not in weights
    default_weight: float = Field(1.0, gt=0)
    # tenant -> fair-share weight
    weights: dict[str, Annotated[float, Field(gt=0)]] = {}
    # a lone tenant's round is cut at about this run time (or one full engine call, if
    # longer), so a tenant that starts sending waits at most that long behind a flood;
    # None: a lone tenant's rounds fill to the batch size
    max_round_s: float | None = Field(0.25, gt=0)
    # fetched events an agent may hold back for fair share (uncommitted); with this many
    # held, fetching pauses until rounds drain them
    max_deferred: int = Field(20_000, ge=0)
    # each tenant writes its requests to its own ingress topic, translate.ingress.<tenant>
    # (on a secure stack only its Kafka user may: `babelstream tenants add`), and workers
    # stamp them with that tenant; off: a request's tenant is what its producer wrote
    identity_from_topic: bool = False
    # how soon workers read the ingress topic of a tenant added after they started
    ingress_discovery_s: float = Field(10.0, gt=0)
    # the clients (`babelstream submit`, `translate`, `results`, TranslationClient) run as
    # this tenant, with the Kafka user `tenants add` made for it: requests go to its ingress
    # and results come back on its reply topics; None: the shared ingress and results
    client_tenant: str | None = Field(None, pattern=rf"^{TOPIC_TENANT_PATTERN}$")
    # quotas: characters per quota window; None = unlimited
    default_quota_chars: int | None = Field(None, ge=1)
    # tenant -> characters per quota window (others: default_quota_chars)
    quota_chars: dict[str, Annotated[int, Field(ge=1)]] = {}
    # the quota's sliding window
    quota_window_s: float = Field(60.0, gt=0)
    # the sliding window moves in steps of this size (Redis hash field per step)
    quota_step_s: float = Field(1.0, gt=0)
    # a tenant counts as active this long after its last request; while two or more are,
    # each round is one quantum per tenant (short), else rounds fill to the batch size
    active_s: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _step_within_window(self) -> TenantSettings:
        if self.quota_step_s > self.quota_window_s:
            raise ValueError(
                f"quota_step_s ({self.quota_step_s}) must not exceed quota_window_s "
                f"({self.quota_window_s})"
            )
        return self

    def weight(self, tenant: str) -> float:
        """A tenant's fair-share weight."""
        return self.weights.get(tenant, self.default_weight)

    def quota(self, tenant: str) -> int | None:
        """A tenant's characters per quota window (None: unlimited)."""
        return self.quota_chars.get(tenant, self.default_quota_chars)


class ReplySettings(_Section):
    """Reply topics: each ``translate`` call or bulk job reads only its own results."""

    # a reply topic's name is this prefix and the caller's reply id
    prefix: str = "translate.replies."
    # partitions of each reply topic
    partitions: int = Field(1, ge=1)
    # a reply topic outlives its call by at most this long if the client never deletes it
    retention_ms: int = Field(3_600_000, ge=60_000)
    # workers: how old a listing of existing reply topics may be, and how long a copy may
    # take before it is given up (the result is on the shared topic anyway)
    listing_refresh_s: float = Field(1.0, gt=0)
    # a copy not delivered within this is given up (counted)
    copy_timeout_s: float = Field(5.0, gt=0)


class SparkClusterSettings(_Section):
    """The local Spark standalone cluster (``babelstream spark up``): a master, N workers."""

    # the address the master and workers bind
    host: str = "127.0.0.1"
    # the master's port (spark://<host>:<master_port>) and its web UI's
    master_port: int = Field(7077, ge=1, le=65535)
    # the master's web UI port
    master_webui_port: int = Field(8080, ge=1, le=65535)
    # worker i uses worker_port + i and worker_webui_port + i
    workers: int = Field(2, ge=1)
    # worker 0's port
    worker_port: int = Field(7078, ge=1, le=65535)
    # worker 0's web UI port
    worker_webui_port: int = Field(8081, ge=1, le=65535)
    # cores each worker offers
    worker_cores: int = Field(1, ge=1)
    # memory each worker offers its executors
    worker_memory: str = "1g"
    # the heap of the master and worker daemons themselves
    daemon_memory: str = "256m"

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"


class FidelitySettings(_Section):
    """Text fidelity (``pipeline/fidelity``): what is protected, glossary refresh."""

    # regular expressions protected like the built-in placeholder forms (changing this or
    # `attributes` changes translations: bump BABELSTREAM_REDIS__CACHE_VERSION with it)
    extra_patterns: tuple[str, ...] = ()
    # HTML/XML attributes whose values are translated
    attributes: tuple[str, ...] = ("alt", "title", "placeholder", "aria-label")
    # a worker re-reads a glossary it holds at most this long after its last read
    glossary_refresh_s: float = Field(2.0, gt=0)
    # terms in one glossary (CLI upload limit)
    max_terms: int = Field(10_000, ge=1)


class BatchingSettings(_Section):
    """How workers shape engine calls (``pipeline/engine/adaptive.py``, ``batching.py``)."""

    # adjust max_wait, batch size and token budget per model from the latency
    # objective, queueing delay, engine time and the SLA job's windows
    adaptive: bool = False
    # the latency objective (P95, ms) per pair id; others get default_p95_ms
    p95_ms: dict[str, Annotated[float, Field(gt=0)]] = {}
    # the latency objective (P95, ms) of a pair without one in p95_ms
    default_p95_ms: float = Field(1000.0, gt=0)
    # the adaptive controller's floor for max_wait and its ceiling for a micro-batch
    # (worker.max_messages is the static micro-batch size without the controller)
    min_wait_s: float = Field(0.002, gt=0)
    # the adaptive controller's ceiling for a micro-batch, in requests
    adaptive_max_messages: int = Field(256, ge=1)
    # With fair share, a lone tenant's round is its oldest held request and the ones
    # nearest to it in length among its next sort_window held requests, so engine calls
    # pad little (a request may overtake older ones of its tenant); 1: oldest first
    sort_window: int = Field(1024, ge=1)
    # bulk calls are cut so each is estimated to run at most this long: a running
    # call cannot be pre-empted, so this bounds how long interactive work waits
    bulk_max_call_s: float = Field(0.05, gt=0)

    @field_validator("p95_ms")
    @classmethod
    def _pair_ids(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_pair_ids(value)

    def objective_ms(self, pair_id: str) -> float:
        """The P95 latency objective of one pair."""
        return self.p95_ms.get(pair_id, self.default_p95_ms)


# widely used languages, by ISO 639-1 code: the default reference languages of detection
REFERENCE_LANGUAGES = (
    *("ar", "bn", "cs", "de", "el", "en", "es", "fa", "fr", "he", "hi", "hu", "id", "it"),
    *("ja", "ko", "nl", "pl", "pt", "ro", "ru", "sv", "th", "tr", "uk", "ur", "vi", "zh"),
)


class DetectionSettings(_Section):
    # languages weighed beside the served ones when a source language is detected
    # (ISO 639-1 codes; lingua's low-accuracy models, about 40 MB for these), so a text
    # in one of them is reported as that language, not as the nearest served one;
    # [] weighs the served languages only
    reference_languages: list[str] = Field(default_factory=lambda: list(REFERENCE_LANGUAGES))
    # a text at least this likely in a language no model translates from is refused
    # as an unsupported source (below it, the most likely served language is used)
    unsupported_confidence: float = Field(0.5, gt=0, le=1)

    @field_validator("reference_languages")
    @classmethod
    def _known_languages(cls, value: list[str]) -> list[str]:
        from lingua import IsoCode639_1

        unknown = []
        for code in value:
            try:
                IsoCode639_1.from_str(code)
            except ValueError:
                unknown.append(code)
        if unknown:
            raise ValueError(f"not ISO 639-1 codes lingua knows: {', '.join(unknown)}")
        return value


class GatewaySettings(_Section):
    """The LibreTranslate-compatible HTTP gateway (``babelstream gateway``).

    See docs/guides/gateway.md.
    """

    # the address the gateway binds
    host: str = "127.0.0.1"
    # the gateway's port (LibreTranslate's default, 5000)
    port: int = Field(5000, ge=0, le=65535)
    # server processes; each has its own Kafka producer and reply topic
    workers: int = Field(1, ge=1, le=64)
    # GET /health also on this port (process i: health_port + i), answered by a small
    # process of its own from the event loop's heartbeat, so a liveness probe is answered at
    # once however busy the loop is; None: only on the main port, behind the calls
    health_port: int | None = Field(None, ge=1, le=65535)
    # that /health answers 503 when the event loop has not run for this long (stuck, not busy)
    health_stall_s: float = Field(10.0, gt=0)
    # calls per minute one caller may make to /translate, /detect and /translate_file:
    # per API key (a key's own req_limit, `keys add --req-limit`, takes its place), else
    # per client address (LibreTranslate's --req-limit); None: no limit. Counted in Redis
    # for every process; 429 "Slowdown: ..." beyond
    req_limit: int | None = Field(None, ge=1)
    # the same per day (LibreTranslate's --daily-req-limit)
    daily_req_limit: int | None = Field(None, ge=1)
    # proxies whose X-Forwarded-For names the client (uvicorn's forwarded_allow_ips): the
    # address req_limit counts by; "*" trusts every peer
    forwarded_allow_ips: str = "127.0.0.1"
    # GET /metrics: the gateway's Prometheus metrics, every process together
    # (LibreTranslate's --metrics); off: 404
    metrics: bool = False
    # GET /metrics needs "Authorization: Bearer <this>" (LibreTranslate's
    # --metrics-auth-token); None: open to whoever reaches the port
    metrics_auth_token: str | None = None
    # names this gateway's reply topics (<replies.prefix>gateway.<instance>.<process>) and the
    # group that commits their offsets, so a restarted gateway resumes where it stopped;
    # default: <hostname>-<port>. Two live gateways must not share it.
    instance_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    # whether a call needs an API key (`babelstream keys add`); without one it is the
    # anonymous tenant's, with that tenant's quota and fair-share weight (tenants.*)
    require_api_key: bool = False
    # the tenant of calls without an API key
    anonymous_tenant: str = Field("anonymous", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    # the anonymous tenant's quota, characters per tenants.quota_window_s shared by every
    # caller without a key (tenants.quota_chars naming that tenant overrides it); None:
    # unlimited. Anonymous callers are one tenant in fair share, so they cannot crowd
    # out keyed tenants, and this bounds how much work they queue at all
    anonymous_quota_chars: int | None = Field(100_000, ge=1)
    # shown in the missing-key error ("Visit <link> to get an API key")
    get_api_key_link: str | None = None
    # how long a call waits for its translations before a 504 with its request id
    # (the result stays fetchable at /translate/result/<id>); the deadline_ms extension
    # overrides it per call
    wait_timeout_ms: int = Field(30_000, ge=100, le=3_600_000)
    # the pipeline deadline of a request (its timeout_ms): at least the call's wait
    request_timeout_ms: int = Field(60_000, ge=100, le=3_600_000)
    # the characters per second one call is at least translated at (`bench engine` gives
    # the engine's rate; leave room for queueing): a call whose characters would take longer
    # than its wait is refused up front (400), and char_limit must fit in wait_timeout_ms
    min_chars_per_s: float = Field(1000.0, gt=0)
    # how often a background probe checks the brokers' TCP port (and how long it waits for
    # a connection); a failed probe answers every call 503 at once, those waiting for
    # acknowledgements too, until a probe succeeds
    probe_interval_s: float = Field(0.5, gt=0, le=1)
    # a produce the brokers answer but do not acknowledge within this (overloaded) is a 503
    produce_timeout_s: float = Field(10.0, gt=0, le=60)
    # Retry-After of a 503
    retry_after_s: int = Field(1, ge=1)
    # request limits, checked before anything is produced (LibreTranslate's char_limit,
    # batch_limit; -1 there, a bound here): characters per call (a list's texts together,
    # as LibreTranslate counts them), texts per list, body bytes
    char_limit: int = Field(5000, ge=1)
    # at most this many texts in one call's list
    batch_limit: int = Field(128, ge=1)
    # a larger body is answered 413
    max_body_bytes: int = Field(1 << 20, ge=1024)
    # a request's head (request line and headers) larger than this, or with more headers,
    # is answered 431 before the application sees it, also while it is still arriving
    max_header_bytes: int = Field(32 * 1024, ge=1024)
    # at most this many headers in a request's head
    max_headers: int = Field(100, ge=1)
    # slow clients: a head not complete this long after its connection opened (or its
    # first byte on a kept-alive connection), a body not complete this long after its
    # head, is answered 408 and the connection closed
    header_timeout_s: float = Field(10.0, gt=0)
    # how long a body may take to arrive after its head
    body_timeout_s: float = Field(30.0, gt=0)
    # after such a 408 or 431 what the client still sends is read and dropped this long
    # before the connection closes, so it reads the answer rather than a reset
    refused_linger_s: float = Field(2.0, ge=0)
    # LibreTranslate passes every translation it answers through html.unescape (&amp; -> &,
    # &#39; -> '), HTML and text alike; False answers the pipeline's translation as it is
    # (an HTML answer then stays well-formed: a &lt; in text is kept)
    unescape_entities: bool = True
    # LibreTranslate's alternatives_limit; the pipeline makes one translation, so
    # alternatives are always empty lists
    alternatives_limit: int = Field(3, ge=0)
    # results that arrived after their caller stopped waiting (or during a restart)
    # are kept this long in Redis, fetchable by request id
    result_ttl_s: int = Field(3600, ge=60)
    # the source language assumed when detection finds none (confidence 0)
    default_source: str = "en"
    # POST /suggest: stored in Redis when on; refused as LibreTranslate refuses it when off
    suggestions: bool = False
    # POST /translate_file: a bulk job per file, kept in <files_dir>/<job id>/
    files_translation: bool = True
    # where uploaded files and their translations are kept
    files_dir: Path = PROJECT_ROOT / "var" / "gateway" / "files"
    # a larger upload is answered 413
    max_file_bytes: int = Field(1 << 20, ge=1)
    # an upload up to this size is answered when translated, as LibreTranslate does; a
    # larger one at once with 202 and a job to poll (GET /translate_file/<job id>)
    sync_file_bytes: int = Field(64 * 1024, ge=0)
    # file jobs one tenant may have running at once (every process counts); more: 429
    max_file_jobs: int = Field(2, ge=1)
    # a file job's folder (the upload, the job's state, the translation) is deleted once
    # nothing in it has changed for this long: its download link then answers 404
    files_ttl_s: float = Field(86_400.0, gt=0)
    # how often each gateway process looks for such folders
    files_clean_every_s: float = Field(60.0, gt=0)
    # GET /frontend/settings: LibreTranslate's web UI timeout (ms)
    frontend_timeout_ms: int = Field(500, ge=0)
    # API key lookups (and misses) are cached this long: a revoked key stops working
    # within it
    key_cache_s: float = Field(5.0, ge=0)
    # the gateway's Redis calls (keys, kept results): under a burst of calls its event
    # loop is busy, so the worker's cache timeout (redis.socket_timeout_s) is too short
    redis_timeout_s: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _limits_fit_the_wait(self) -> GatewaySettings:
        # the documented limits and the deadline agree: a call at char_limit can be answered
        # within the default wait
        needed_ms = self.work_ms(self.char_limit)
        if needed_ms > self.wait_timeout_ms:
            raise ValueError(
                f"char_limit ({self.char_limit}) at min_chars_per_s ({self.min_chars_per_s:g}) "
                f"needs {needed_ms:.0f} ms, more than wait_timeout_ms ({self.wait_timeout_ms}): "
                "lower char_limit or raise wait_timeout_ms"
            )
        return self

    def work_ms(self, chars: int) -> float:
        """How long translating ``chars`` characters of one call may take, at the least rate."""
        return 1000 * chars / self.min_chars_per_s


class ModelImportSettings(_Section):
    """Model imports (``babelstream models add``): downloads and the Argos package index."""

    # downloads land here (a .part file while they run, resumed on the next try)
    download_dir: Path = PROJECT_ROOT / "var" / "downloads"
    # each connect or read may wait this long; a download is tried this many times
    # (transport errors and 5xx answers; a resumed try continues where the last stopped)
    download_timeout_s: float = Field(30.0, gt=0)
    # tries of one download before it gives up
    download_attempts: int = Field(5, ge=1)
    # the first wait between tries; it doubles, up to download_retry_max_s
    download_retry_s: float = Field(1.0, ge=0)
    # the longest wait between tries
    download_retry_max_s: float = Field(30.0, ge=0)
    # Argos Translate's package index (`babelstream models add argos --pair en_de`)
    argos_index: str = (
        "https://raw.githubusercontent.com/argosopentech/argospm-index/main/index.json"
    )
    # the Marian converter's weight type for OPUS-MT releases
    quantization: Quantization = "int8"


class DrillSettings(_Section):
    """Fault drills (``babelstream drill``, ``tests/chaos``): traffic, fault lengths, bounds."""

    # paced traffic: requests per second for this many seconds; the fault comes
    # after this fraction of it
    rate: float = Field(50.0, gt=0)
    # how long the traffic runs
    seconds: float = Field(30.0, gt=0)
    # the fault comes after this fraction of the traffic
    fault_at: float = Field(1 / 3, gt=0, lt=1)
    # every Nth request repeats the text of the one sent repeat_lag_s earlier (0: none)
    repeat_every: int = Field(5, ge=0)
    # how far back a repeated text is taken from
    repeat_lag_s: float = Field(2.0, gt=0)
    # drill requests must never time out: a timeout result would hide a stall
    request_timeout_ms: int = Field(600_000, ge=1)
    # after the heal, this long of repeats of texts answered before the fault
    after_heal_s: float = Field(5.0, ge=0)
    # workers the drill starts (one consumer group, distinct instance ids)
    workers: int = Field(2, ge=1)
    # a stopped broker or Redis stays down this long; a worker is cut off this long
    outage_s: float = Field(10.0, ge=0)
    # how long a worker is cut off the network
    cut_s: float = Field(20.0, gt=0)
    # bounds: each fault or heal step; the results after the traffic; commits after that
    step_timeout_s: float = Field(240.0, gt=0)
    # how long the drill waits for the results after the traffic
    tail_timeout_s: float = Field(180.0, gt=0)
    # how long the drill waits for the offsets to be committed
    commit_timeout_s: float = Field(60.0, gt=0)
    # the SLA job drilled on a checkpoint of its own: windows and allowed lateness
    sla_window_s: float = Field(5.0, gt=0)
    # the drilled SLA job's allowed lateness
    sla_watermark_s: float = Field(5.0, ge=0)
    # worker logs, SLA checkpoints and the JSON-lines report
    home: Path = PROJECT_ROOT / "var" / "chaos"
    # the cut-off worker runs with this (system) group, which the firewall rule matches
    cut_group: str = "babelstream-drill"


class BenchSettings(_Section):
    """Benchmarks (``babelstream bench``): how large their default workloads are."""

    # The run time a bench's default request counts are sized for (from the model's
    # measured call cost) is multiplied by this. 1: as documented (each bench a few
    # minutes); CI's smoke run of every bench takes the smallest sizes with 0.01.
    scale: float = Field(1.0, gt=0, le=1)


# the sections only development tooling reads (``babelstream up``, ``spark up``, ``drill``,
# ``bench``)
DEVELOPMENT_SECTIONS = frozenset({"stack", "spark", "drill", "bench"})


class Settings(BaseSettings):
    """Root settings; sections are frozen, so pass them around freely."""

    model_config = SettingsConfigDict(
        env_prefix="BABELSTREAM_",
        env_nested_delimiter="__",
        # BABELSTREAM_X=null sets an optional setting to None (no bound, unlimited, ...)
        env_parse_none_str="null",
        frozen=True,
        extra="ignore",
    )

    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    limits: LimitSettings = LimitSettings()
    engine: EngineSettings = EngineSettings()
    worker: WorkerSettings = WorkerSettings()
    batching: BatchingSettings = BatchingSettings()
    fidelity: FidelitySettings = FidelitySettings()
    detection: DetectionSettings = DetectionSettings()
    tenants: TenantSettings = TenantSettings()
    replies: ReplySettings = ReplySettings()
    bulk: BulkSettings = BulkSettings()
    sla: SlaSettings = SlaSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    dashboard: DashboardSettings = DashboardSettings()
    gateway: GatewaySettings = GatewaySettings()
    models: ModelImportSettings = ModelImportSettings()
    # Development tooling (DEVELOPMENT_SECTIONS): the local stack, the local Spark
    # cluster, fault drills, benchmarks. No worker, router, job or gateway reads them.
    stack: StackSettings = StackSettings()
    spark: SparkClusterSettings = SparkClusterSettings()
    drill: DrillSettings = DrillSettings()
    bench: BenchSettings = BenchSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_VARIABLE)
        if config_file:
            path = check_config_file(Path(config_file))
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Build settings from env / config file, with explicit overrides on top."""
    return Settings(**overrides)


# stands for a mapping's key in a variable's name (BABELSTREAM_SLA__PAIR_OBJECTIVES__<KEY>__P95_MS)
MAPPING_KEY = "<KEY>"


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a setting of this type holds, itself or as a mapping's values; else None."""
    if get_origin(annotation) is dict:
        annotation = get_args(annotation)[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


class SettingVariable(NamedTuple):
    """One environment variable of a setting, and the field it sets."""

    # BABELSTREAM_SLA__OBJECTIVES__P95_MS
    variable: str
    # sla.objectives.p95_ms
    setting: str
    field: FieldInfo
    # the model that declares the field (its source holds the field's comment)
    owner: type[BaseModel]


def model_variables(
    model: type[BaseModel], variable: str, setting: str
) -> Iterator[SettingVariable]:
    """The variables of ``model``'s fields under ``variable``, nested models' fields included.

    An object setting comes first as a whole (its variable takes JSON), then each of
    its fields as a variable of its own; a mapping of objects names its key
    :data:`MAPPING_KEY`.
    """
    for name, field in model.model_fields.items():
        own = SettingVariable(f"{variable}__{name}".upper(), f"{setting}.{name}", field, model)
        yield own
        inner = nested_model(field.annotation)
        if inner is None:
            continue
        if get_origin(field.annotation) is dict:
            yield from model_variables(
                inner, f"{own.variable}__{MAPPING_KEY}", f"{own.setting}.{MAPPING_KEY.lower()}"
            )
        else:
            yield from model_variables(inner, own.variable, own.setting)


def _setting_fields() -> Iterator[SettingVariable]:
    """Every setting's variable, section by section, nested ones included."""
    for section, info in Settings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        yield from model_variables(model, f"{ENV_PREFIX}{section}", section)


def setting_variables() -> dict[str, str]:
    """Every ``BABELSTREAM_<SECTION>__<FIELD>[__<FIELD>]`` variable -> its dotted setting."""
    return {each.variable: each.setting for each in _setting_fields()}


# settings of releases before 0.2 that were renamed or removed, and what to use instead
RETIRED: dict[str, str] = {
    "BABELSTREAM_KAFKA__PAIR_PARTITIONS": "renamed BABELSTREAM_KAFKA__WORK_PARTITIONS in 0.2 "
    "(work topics are per model)",
    "BABELSTREAM_STACK__PAIRS": "removed in 0.2: `babelstream up` creates the work topics of "
    "every model in the registry",
    "BABELSTREAM_BATCHING__MAX_MESSAGES": "renamed BABELSTREAM_BATCHING__ADAPTIVE_MAX_MESSAGES "
    "in 0.2 (worker.max_messages is the static micro-batch size)",
}


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``BABELSTREAM_*`` variable that names no setting, naming the closest one.

    Without this a misspelled section is silently ignored and a misspelled
    field fails with a pydantic dump.
    """
    valid = setting_variables().keys() | {CONFIG_VARIABLE}
    sections = {f"{ENV_PREFIX}{section}".upper() for section in Settings.model_fields}
    # a mapping takes its keys as further levels (..._SLA__THRESHOLDS_MS__en_de=2000),
    # and a mapping of objects their fields after the key (...__en_de__P99_MS=900)
    mappings = {
        f"{each.variable}__": nested_model(get_args(each.field.annotation)[1])
        for each in _setting_fields()
        if get_origin(each.field.annotation) is dict
    }
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in valid or upper in sections:
            continue
        key = MAPPING_KEY
        prefix = next((p for p in mappings if upper.startswith(p)), None)
        if prefix is not None:
            values = mappings[prefix]
            key, _, inner = name[len(prefix) :].partition("__")
            if key and (not inner or (values is not None and inner.upper() in _fields(values))):
                continue
            upper = f"{prefix}{MAPPING_KEY}__{inner.upper()}"
        if upper in RETIRED:
            raise ConfigError(f"setting {name} was {RETIRED[upper]}")
        close = difflib.get_close_matches(upper, sorted(valid), n=1, cutoff=0.6)
        hint = (
            f"did you mean {close[0].replace(MAPPING_KEY, key)}?"
            if close
            else f"settings are {ENV_PREFIX}<SECTION>__<FIELD> (docs/reference/settings.md)"
        )
        raise ConfigError(f"unknown setting {name}; {hint}")


def _fields(model: type[BaseModel]) -> set[str]:
    """The model's field names as variables spell them."""
    return {name.upper() for name in model.model_fields}


def _json_shaped(annotation: Any) -> bool:
    """Whether pydantic-settings reads a variable of this type as JSON (objects, lists)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _json_shaped(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_json_shaped(arg) for arg in get_args(annotation) if arg is not type(None))
    if origin in (dict, list, tuple, set, frozenset):
        return True
    return isinstance(annotation, type) and issubclass(annotation, BaseModel | dict | list | tuple)


def _json_example(default: Any) -> str:
    """A short JSON example of a setting from its default: its first entry, or its shape."""
    if isinstance(default, BaseModel):
        default = default.model_dump(mode="json", exclude_none=True)
    if isinstance(default, dict):
        first = next(iter(default.items()), None)
        return f"a JSON object, e.g. {json.dumps(dict([first]))}" if first else "a JSON object"
    if isinstance(default, list | tuple) and default:
        return f"a JSON list, e.g. {json.dumps(list(default), default=str)}"
    return "a JSON list"


def json_variables() -> dict[str, str]:
    """Variables whose value is JSON (sections, objects, lists) -> what they expect."""
    shapes = {
        f"{ENV_PREFIX}{section}".upper(): _json_example(info.default)
        for section, info in Settings.model_fields.items()
    }
    for each in _setting_fields():
        if _json_shaped(each.field.annotation):
            shapes[each.variable] = _json_example(each.field.default)
    return shapes


def check_json_values(environ: Mapping[str, str]) -> None:
    """Refuse a JSON-valued variable that is not JSON, naming it, the position and the form.

    pydantic-settings raises this as two chained tracebacks that name only the section.
    """
    shapes = json_variables()
    for name in sorted(environ):
        expected = shapes.get(name.upper())
        if expected is None:
            continue
        try:
            json.loads(environ[name])
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                f"give {expected}"
            ) from None


def check_config_file(path: Path) -> Path:
    """``path`` if it is a readable TOML file; else a one-line ConfigError with the position."""
    fix = f"fix the path or unset {CONFIG_VARIABLE}"
    if not path.exists():
        raise ConfigError(f"{CONFIG_VARIABLE} names {path}, which does not exist: {fix}")
    if path.is_dir():
        raise ConfigError(f"{CONFIG_VARIABLE} names {path}, which is a directory, not a TOML file")
    try:
        sections = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{CONFIG_VARIABLE} file {path} is not valid TOML: {exc}; fix it or unset "
            f"{CONFIG_VARIABLE}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{CONFIG_VARIABLE} file {path} is not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{CONFIG_VARIABLE} file {path} cannot be read ({exc.strerror}): {fix}"
        ) from None
    # the root model ignores names it does not know (so other BABELSTREAM_* uses pass
    # through check_environment), which would leave a misspelled [section] unread
    for name in sorted(set(sections) - set(Settings.model_fields)):
        close = difflib.get_close_matches(name, sorted(Settings.model_fields), n=1, cutoff=0.6)
        hint = f" (did you mean [{close[0]}]?)" if close else ""
        raise ConfigError(f"{CONFIG_VARIABLE} file {path}: [{name}] is no settings section{hint}")
    return path


def describe_settings_error(
    exc: ValidationError, environ: Mapping[str, str] | None = None, config_file: str | None = None
) -> str:
    """The problems of invalid settings on one line, each named by its variable, or by the
    config file and key when the value came from there (not from ``environ``)."""
    given = {name.upper() for name in environ or {}}
    parts = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"]]
        variable = ENV_PREFIX + "__".join(loc[:2]).upper()
        section_variable = ENV_PREFIX + loc[0].upper()
        if config_file and len(loc) >= 2 and not given & {variable, section_variable}:
            # [sla.objectives] p95: a nested table's dotted name, then the key
            name = f"{config_file}: [{'.'.join(loc[:-1])}] {loc[-1]}"
        else:
            name = variable
        value = err.get("input")
        shown = f"={value}" if isinstance(value, str | int | float) else ""
        problem = "no such setting" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{name}{shown}: {problem}")
    return "; ".join(parts)


def settings_from_environment() -> Settings:
    """Settings for the command line; unknown or invalid settings, JSON that does not parse
    and a config file that is missing or not TOML raise a one-line ConfigError."""
    check_environment(os.environ)
    check_json_values(os.environ)
    try:
        return load_settings()
    except ValidationError as exc:
        config_file = os.environ.get(CONFIG_VARIABLE)
        source = f" (environment or {CONFIG_VARIABLE} file)" if config_file else ""
        problems = describe_settings_error(exc, os.environ, config_file)
        raise ConfigError(f"invalid settings{source}: {problems}") from exc
