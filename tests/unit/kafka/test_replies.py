"""Reply topics: names, and the worker's check that a reply topic still exists."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.kafka.reply_topics import ReplyTopic, ReplyTopicCheck, ephemeral_name
from pipeline.settings import KafkaSettings, ReplySettings


class Listing:
    def __init__(self, topics: set[str]) -> None:
        self.topics = topics
        self.calls = 0

    async def __call__(self) -> set[str]:
        self.calls += 1
        return set(self.topics)


def test_existing_topics_are_listed_at_most_once_per_interval() -> None:
    asyncio.run(_listing_scenario())


async def _listing_scenario() -> None:
    now = [0.0]
    listing = Listing({"translate.replies.a", "translate.results"})
    check = ReplyTopicCheck(listing, refresh_s=1.0, clock=lambda: now[0])
    assert await check.existing({"translate.replies.a", "translate.replies.b"}) == {
        "translate.replies.a"
    }
    listing.topics = {"translate.replies.b", "translate.replies.c"}  # a deleted; b, c created
    assert await check.existing({"translate.replies.a"}) == {"translate.replies.a"}
    assert listing.calls == 1, "within the interval the listing of known names is reused"
    assert await check.existing({"translate.replies.c"}) == {"translate.replies.c"}
    assert listing.calls == 2, "a name the listing did not know is listed again at once"
    now[0] = 1.0
    assert await check.existing({"translate.replies.a", "translate.replies.b"}) == {
        "translate.replies.b"
    }
    assert listing.calls == 3
    assert await check.existing(set()) == set() and listing.calls == 3


def test_ephemeral_names_are_fresh_and_labelled() -> None:
    replies = ReplySettings()
    a, b = ephemeral_name(replies), ephemeral_name(replies, "job-1")
    assert a.startswith("translate.replies.") and a != ephemeral_name(replies)
    assert b.startswith("translate.replies.job-1.")


def test_reply_topic_names_are_checked() -> None:
    with pytest.raises(ValueError, match="invalid reply topic"):
        ReplyTopic(KafkaSettings(), ReplySettings(), "no spaces allowed", ephemeral=False)
