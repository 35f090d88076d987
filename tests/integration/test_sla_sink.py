"""The SLA job's Kafka sink on a real broker: a batch and its mark commit together.

Spark re-runs a micro-batch it had not committed when the job died. A job
killed after its batch's records reached the log but before it recorded
that they had (the gap a mark kept in a file leaves) must not make readers
see the batch twice; a batch committed before the kill must not be written
again.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from kafka import KafkaConsumer, TopicPartition

from jobs.sla import KafkaSink
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import PROJECT_ROOT, Settings
from pipeline.stack.manager import Endpoints

pytestmark = pytest.mark.integration

# A job that dies mid-batch: its records flushed to the log, its transaction open.
_KILLED_MID_BATCH = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    from jobs.sla import KafkaSink
    from pipeline.settings import load_settings
    from pipeline.stack import layout, manager

    checkpoint, topic = Path(sys.argv[1]), sys.argv[2]
    settings = manager.endpoints(layout.with_layout(load_settings())).settings
    sla = settings.sla.model_copy(update={"checkpoint_dir": checkpoint})
    producer = KafkaSink(settings.model_copy(update={"sla": sla}))._open()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, key=b"k", value=f"killed-{i}".encode())
    producer.flush()
    print("flushed", flush=True)
    time.sleep(600)
    """
)


def _with_checkpoint(settings: Settings, checkpoint: Path) -> Settings:
    sla = settings.sla.model_copy(update={"checkpoint_dir": checkpoint})
    return settings.model_copy(update={"sla": sla})


def _values(
    settings: Settings, topic: str, isolation: Literal["read_committed", "read_uncommitted"]
) -> list[bytes]:
    consumer = KafkaConsumer(
        **kafka_python_options(settings.kafka, "tests-sla-sink"),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        isolation_level=isolation,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return [record.value for record in consumer]
    finally:
        consumer.close()


def _kill_mid_batch(checkpoint: Path, topic: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_BATCH, str(checkpoint), topic],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == b"flushed\n", (line, proc.stderr.read() if proc.stderr else b"")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_batch_killed_before_its_commit_is_read_once(
    stack: Endpoints, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(1)
    settings = _with_checkpoint(stack.settings, tmp_path / "checkpoint")

    first = KafkaSink(settings)
    assert not first.written(topic, 0)
    first.send(topic, [(b"k", b"batch-0")], 0)
    first.close()

    _kill_mid_batch(settings.sla.checkpoint_dir, topic)  # batch 1, never committed

    restarted = KafkaSink(settings)
    assert restarted.written(topic, 0), "batch 0 committed: a re-run skips it"
    assert not restarted.written(topic, 1), "batch 1 died uncommitted: a re-run writes it"
    restarted.send(topic, [(b"k", b"batch-1")], 1)
    restarted.close()

    again = KafkaSink(settings)
    assert again.written(topic, 1)
    again.close()

    assert _values(settings, topic, "read_committed") == [b"batch-0", b"batch-1"]
    # the control: the killed batch did reach the log; only its abort hides it
    uncommitted = _values(settings, topic, "read_uncommitted")
    assert sum(v.startswith(b"killed-") for v in uncommitted) == 5, uncommitted


def test_another_checkpoint_has_marks_of_its_own(
    stack: Endpoints, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(1)
    one = KafkaSink(_with_checkpoint(stack.settings, tmp_path / "one"))
    one.send(topic, [(b"k", b"one")], 7)
    one.close()
    other = KafkaSink(_with_checkpoint(stack.settings, tmp_path / "other"))
    assert other.transactional_id != one.transactional_id
    assert not other.written(topic, 0)
    other.close()


# The job in a process of its own (its own Spark session: the job stops it when it
# fails, which would stop a session this process shares), its Kafka refusing.
_SINK_REFUSED = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from jobs.sla import run
    from pipeline.settings import load_settings
    from pipeline.sla.logic import SlaJobError
    from pipeline.stack import layout, manager

    checkpoint, port = Path(sys.argv[1]), int(sys.argv[2])
    settings = manager.endpoints(layout.with_layout(load_settings())).settings
    kafka = settings.kafka.model_copy(
        update={"bootstrap_servers": f"127.0.0.1:{port}", "request_timeout_ms": 1000}
    )
    sla = settings.sla.model_copy(update={"checkpoint_dir": checkpoint})
    try:
        run(settings.model_copy(update={"kafka": kafka, "sla": sla}), until_idle_s=5.0)
    except SlaJobError as exc:
        print(exc, flush=True)
    """
)


def test_a_job_whose_sink_cannot_start_says_so_before_any_batch(
    stack: Endpoints, tmp_path: Path
) -> None:
    # bound, never listening: every connection to it is refused while the test holds it
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = str(closed.getsockname()[1])
        done = subprocess.run(
            [sys.executable, "-c", _SINK_REFUSED, str(tmp_path / "checkpoint"), port],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.stdout.startswith("the SLA job's Kafka sink could not start: "), (
        done.stdout,
        done.stderr[-2000:],
    )
    # the sink failed while the session started: no query ran, nothing was checkpointed
    assert not (tmp_path / "checkpoint" / "offsets").exists()
