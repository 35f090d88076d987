"""Checks an engine output must pass before it is published.

A run's output is good when it has every placeholder token exactly once,
inline elements still open before they close and nest, as many line breaks
as its source, and no corruption the source did not have: U+FFFD
replacement characters (byte-fallback pieces decoded out of order) or lone
surrogates. Document-level checks (well-formed markup, the same multiset of
tags) live with each format.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pipeline.fidelity.document import Run
from pipeline.fidelity.tokens import CLOSE, OPEN, TOKEN_RE

Problem = Literal["corrupt", "tokens", "lines"]

REPLACEMENT = "\ufffd"


def corrupted(source: str, output: str) -> bool:
    """True when ``output`` has more U+FFFD than ``source``, or any lone surrogate."""
    if output.count(REPLACEMENT) > source.count(REPLACEMENT):
        return True
    return any("\ud800" <= ch <= "\udfff" for ch in output)


def check_run(run: Run, output: str) -> Problem | None:
    """The first problem of ``output`` as a translation of ``run``, or None."""
    source = run.engine_text()
    if corrupted(source, output):
        return "corrupt"
    if output.count("\n") != source.count("\n"):
        return "lines"
    return None if tokens_ok(run, output) else "tokens"


def tokens_ok(run: Run, output: str) -> bool:
    """Every token of ``run`` exactly once, no stray bracket, open/close pairs nested."""
    spans = run.spans()
    expected = Counter(i for i, s in enumerate(spans) if s.kind != "newline")
    found = [int(m.group(1)) for m in TOKEN_RE.finditer(output)]
    if Counter(found) != expected:
        return False
    bare = TOKEN_RE.sub("", output)
    if OPEN in bare or CLOSE in bare:
        return False
    stack: list[int | None] = []
    for index in found:
        span = spans[index]
        if span.kind == "open":
            stack.append(span.group)
        elif span.kind == "close" and (not stack or stack.pop() != span.group):
            return False
    return not stack
