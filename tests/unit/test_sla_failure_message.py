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
