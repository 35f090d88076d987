"""The SLA job's failure message: a checkpoint from an earlier state layout says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.sla import failure_message

CHECKPOINT = Path("/var/sla/checkpoint")


@pytest.mark.parametrize(
    "code", ["STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"]
)
def test_an_earlier_state_layout_names_the_checkpoint_and_the_way_out(code: str) -> None:
    spark_says = (
        f"[STREAM_FAILED] Query [id = 1] terminated with exception: [{code}] Provided value "
        "schema does not match existing state value schema.\nPlease check number and type "
        "of fields.\nExisting value_schema=StructType(...)"
    )
    message = failure_message(spark_says, CHECKPOINT)
    assert message.startswith(f"the checkpoint {CHECKPOINT} holds state of an earlier version")
    assert code in message and "BABELSTREAM_SLA__CHECKPOINT_DIR" in message
    assert "\n" not in message


def test_other_failures_keep_sparks_words() -> None:
    assert failure_message("[STREAM_FAILED] boom", CHECKPOINT) == (
        "the SLA query failed: [STREAM_FAILED] boom"
    )


def test_a_sink_failure_is_its_own_one_line_error_without_traceback_or_plan() -> None:
    spark_says = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function "
        "in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return "
        "Message: Traceback (most recent call last):\n"
        '  File "/work/jobs/sla.py", line 418, in _read_mark\n'
        "    offsets = admin.list_group_offsets({self.transactional_id: [holder]})\n"
        "kafka.errors.CoordinatorNotAvailableError: [Error 15] CoordinatorNotAvailableError: "
        "FindCoordinatorResponse error for GROUP/babelstream-sla-1\n"
        "\n=== Streaming Query ===\nIdentifier: babelstream_sla\n"
        "Current Committed Offsets: {}\n"
        "Current Plan:\nWriteToMicroBatchDataSourceV1 ForeachBatchSink\n"
        "+- ~Project [struct(series, ...)]\n"
        "TypeError: not a traceback line, part of the plan\n"
    )
    assert failure_message(spark_says, CHECKPOINT) == (
        "the SLA query failed: kafka.errors.CoordinatorNotAvailableError: [Error 15] "
        "CoordinatorNotAvailableError: FindCoordinatorResponse error for GROUP/babelstream-sla-1"
    )


def test_a_jvm_failure_keeps_sparks_first_line_only() -> None:
    spark_says = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Failed to construct kafka "
        "consumer\n\tat org.apache.kafka.clients.consumer.KafkaConsumer.<init>(...)\n"
        "\n=== Streaming Query ===\nCurrent Plan: ...\n"
    )
    assert failure_message(spark_says, CHECKPOINT) == (
        "the SLA query failed: [STREAM_FAILED] Query [id = 1] terminated with exception: "
        "Failed to construct kafka consumer"
    )
