"""What the fair-share agent knows of each held request: tenant, size and length."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from pipeline.contract.pairs import Pair
from pipeline.kafka.offsets import Ticket, TopicPartition
from workers.control import held_of

TICKET = Ticket(TopicPartition("translate.work.opus-mt-en-de", 0), 7, 1)


def event(value: bytes) -> Any:
    return SimpleNamespace(message=SimpleNamespace(value=value))


def test_a_request_is_held_with_its_tenant_chars_and_token_length() -> None:
    document = {"tenant": "acme", "text": "Hello there world", "source_lang": "en"}
    raw = json.dumps({**document, "target_lang": "de"}).encode()
    # the length is the model's tokens of the request's own pair
    tokens = {Pair("en", "de"): lambda text: len(text.split()) + 1}
    held = held_of(event(raw), TICKET, lambda text, pair: tokens[pair](text))
    assert (held.tenant, held.chars, held.length) == ("acme", 17, 4)
    assert held_of(event(raw), TICKET).length == 17, "no tokenizer: length in characters"


def test_unreadable_requests_and_tokenizer_failures_still_get_held() -> None:
    def broken(_text: str, _pair: Pair) -> int:
        raise RuntimeError("tokenizer failed")

    garbage = held_of(event(b"\xff not json"), TICKET, broken)
    assert (garbage.tenant, garbage.chars, garbage.length) == ("default", 1, 1)
    raw = json.dumps({"text": "abc"}).encode()
    assert held_of(event(raw), TICKET, broken).length == 3, "the engine step judges it later"
