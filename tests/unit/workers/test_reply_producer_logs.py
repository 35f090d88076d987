"""The reply producer demotes kafka-python's "not found" only for reply topics."""

from __future__ import annotations

import logging

from workers.control import _DeletedReplyTopics


def record(topic: str) -> logging.LogRecord:
    return logging.LogRecord(
        "kafka.cluster",
        logging.ERROR,
        __file__,
        1,
        "Topic %s not found in cluster metadata",
        (topic,),
        None,
    )


def test_a_deleted_reply_topic_is_demoted_and_other_topics_are_not() -> None:
    demote = _DeletedReplyTopics("translate.replies.")
    logger = logging.getLogger("kafka.cluster")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        check(demote)
    finally:
        logger.setLevel(level)


def check(demote: _DeletedReplyTopics) -> None:

    reply = record("translate.replies.abc")
    assert demote.filter(reply) is False
    assert reply.levelno == logging.DEBUG

    work = record("translate.requests")
    assert demote.filter(work) is True
    assert work.levelno == logging.ERROR
