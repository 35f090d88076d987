"""The gateway bench's heavy caller: calls packed at the gateway's limits."""

from __future__ import annotations

from pipeline.bench.gateway import heavy_calls


def test_heavy_calls_are_packed_at_the_limits_in_order() -> None:
    texts = ["aaaa", "bbb", "cc", "dddddd", "e", "fffffffffff", "g"]
    # 6 characters or 2 texts a call, whichever comes first; an 11-character text never fits
    assert heavy_calls(texts, char_limit=6, batch_limit=2) == [
        ["aaaa"],
        ["bbb", "cc"],
        ["dddddd"],
        ["e", "g"],
    ]
    assert heavy_calls([], 6, 2) == []
