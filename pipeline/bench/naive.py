"""The baseline many teams write first: consume one request, translate it, commit, repeat.

Run as its own process (``python -m pipeline.bench.naive``) by ``babelstream
bench naive``; same model and engine settings as the workers, no batching,
no caching, no dedup.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import click
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from pipeline.contract.messages import TranslationRequest, TranslationResult, now_ms
from pipeline.contract.pairs import RESULTS_TOPIC
from pipeline.engine.translator import CTranslate2Translator
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import load_settings

# each bench run consumes a topic of its own: NAIVE_TOPIC.<run id>
NAIVE_TOPIC = "translate.bench.naive"

log = logging.getLogger(__name__)


def assign_all(consumer: KafkaConsumer, topic: str, timeout_s: float) -> None:
    """Assign every partition of ``topic``, once this client's metadata lists them.

    The run's topic is the consumer's alone, so it takes every partition
    itself rather than join a group: a group member subscribed to a topic
    created a moment ago once waited out a whole bench without an
    assignment. A KRaft broker may list a new topic a little after the one
    that created it, hence the wait.
    """
    deadline = time.monotonic() + timeout_s
    while not (partitions := consumer.partitions_for_topic(topic)):
        if time.monotonic() > deadline:
            raise click.ClickException(f"topic {topic} has no partitions after {timeout_s:.0f}s")
        time.sleep(0.5)
    consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
    log.info("consuming %s partitions %s", topic, sorted(partitions))


def serve(topic: str, group: str, pair_id: str, idle_exit_s: float) -> None:
    """Consume, translate one request, produce its result, commit; repeat until idle."""
    settings = load_settings()
    translator = CTranslate2Translator.from_settings(settings.engine, [pair_id])
    consumer = KafkaConsumer(
        **kafka_python_options(settings.kafka, "bench-naive"),
        group_id=group,  # for its offset commits only: it joins no group
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=1,
    )
    assign_all(consumer, topic, settings.kafka.request_timeout_ms / 1000)
    producer = KafkaProducer(**kafka_python_options(settings.kafka, "bench-naive"), acks="all")
    # SIGTERM (the bench is done): finish the message in hand, then stop
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    last = time.monotonic()
    while not stopping.is_set() and time.monotonic() - last < idle_exit_s:
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                last = time.monotonic()
                request = TranslationRequest.from_json(record.value)
                started = now_ms()
                (out,) = translator.translate_batch([request.text], request.pair)
                result = TranslationResult.for_request(
                    request,
                    status="ok",
                    translation=out.text,
                    model=translator.model_id,
                    cache="miss",
                    started_at=started,
                    batch_size=1,
                    input_tokens=out.input_tokens,
                    output_tokens=out.output_tokens,
                    worker="naive",
                )
                producer.send(
                    RESULTS_TOPIC, key=request.request_id.encode(), value=result.to_json()
                ).get(timeout=30)
                consumer.commit()
    consumer.close()
    producer.close()


@click.command()
@click.option("--topic", default=NAIVE_TOPIC, show_default=True)
@click.option("--group", required=True, help="Consumer group (fresh per run).")
@click.option("--pair", "pair_id", required=True, help="The pair to load (SRC_TGT).")
@click.option(
    "--idle-exit",
    type=float,
    default=600.0,
    show_default=True,
    help="Exit after this many seconds without a message.",
)
def main(topic: str, group: str, pair_id: str, idle_exit: float) -> None:
    """Serve the naive baseline until idle (started by ``babelstream bench naive``)."""
    # the bench's log of this process: what a consumer that never answers was doing
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    serve(topic, group, pair_id, idle_exit)


if __name__ == "__main__":
    main()
