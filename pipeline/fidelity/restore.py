"""Restore: engine outputs become the final text, checked, with a fidelity verdict.

Characters the model's tokenizer knows only as bytes (or not at all) are
protected like placeholders before anything is sent, so they are copied
through exactly: a model copying byte pieces can slip one byte and turn 🚆
into another valid character, or break it into U+FFFD.

Each segment climbs a ladder until its output passes
:func:`pipeline.fidelity.quality.check_run`:

1. ``masked`` — the segment as prepared, placeholders as tokens; lost,
   duplicated or misnested tokens go to 2, corrupted output (U+FFFD or a
   lone surrogate the source did not have) to 3.
2. ``aligned`` — translated again without its tokens, with the model's
   attention; the tokens are put back next to the words they belong to
   (:mod:`pipeline.fidelity.align`). Only for engines that give attention.
3. ``nodes`` — every text part between protected spans translated on its
   own (node by node), non-ASCII symbols copied through too; a node still
   corrupted is tried once more word by word.

A segment still failing then fails the request with reason ``bad_output``:
corrupted text is never published as ``ok``. The assembled document is
checked once more (well-formed, same tags, same Markdown structure); when
that fails every segment goes to ``nodes``.

The verdict is the worst level any segment needed: ``exact``, ``aligned``
or ``fallback``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Literal as TypingLiteral
from typing import Protocol

from pipeline.engine.translator import AlignedTranslation, Translation
from pipeline.fidelity.align import Stripped, reinsert, strip_tokens
from pipeline.fidelity.document import Doc, Literal, Run, Span, hits, literal_doc, render
from pipeline.fidelity.prepare import Prepared
from pipeline.fidelity.quality import check_run, corrupted
from pipeline.fidelity.tokens import token

Verdict = TypingLiteral["exact", "aligned", "fallback"]
_RANK: dict[Verdict, int] = {"exact": 0, "aligned": 1, "fallback": 2}
Level = TypingLiteral["masked", "aligned", "nodes", "words"]
_VERDICTS: dict[Level, Verdict] = {
    "masked": "exact",
    "aligned": "aligned",
    "nodes": "fallback",
    "words": "fallback",
}
_WORDS = re.compile(r"(\s+)")


@dataclass(frozen=True, slots=True)
class Refused:
    """The engine failed on one call's text on its own (input-caused, per the hot path)."""

    error: str


@dataclass(frozen=True, slots=True)
class Call:
    """One engine input; ``aligned`` asks for attention too."""

    text: str
    aligned: bool = False


@dataclass(frozen=True, slots=True)
class HitCount:
    """A glossary term and how often it was applied."""

    source: str
    target: str | None
    count: int


@dataclass(frozen=True, slots=True)
class Restored:
    """The final text of a request and how faithfully it was produced."""

    text: str
    fidelity: Verdict
    glossary_hits: tuple[HitCount, ...]
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Failed:
    """A request whose translation could not be made faithful (reason ``bad_output``)."""

    reason: str
    message: str


class SegmentEngine(Protocol):
    """What restoration needs from the engine beyond the first round."""

    def can_align(self) -> bool:
        """True when :meth:`translate_aligned` is available."""
        ...

    def unknown_characters(self, text: str) -> frozenset[str]:
        """Characters of ``text`` the model knows only as bytes or not at all."""
        ...


def protect_unknown(run: Run, unknown: Callable[[str], frozenset[str]]) -> Run | None:
    """``run`` with each stretch of unknown characters protected, or None when it has none."""
    parts: list[str | Span] = []
    changed = False
    for part in run.parts:
        chars = frozenset() if isinstance(part, Span) else unknown(part)
        if isinstance(part, Span) or not chars:
            parts.append(part)
            continue
        changed = True
        for is_unknown, group in groupby(part, key=lambda ch: ch in chars):
            piece = "".join(group)
            parts.append(Span(literal_doc(piece)) if is_unknown else piece)
    return Run(tuple(parts), run.escape) if changed else None


def _symbols(text: str) -> frozenset[str]:
    """Non-ASCII characters of ``text`` that are neither letters nor marks nor digits."""
    return frozenset(
        ch for ch in text if not ch.isascii() and unicodedata.category(ch)[0] not in "LMN"
    ) | frozenset(ch for ch in text if unicodedata.category(ch) in ("No", "Nl"))


def _split_words(run: Run) -> Run:
    """``run`` with every text part cut into words and the whitespace between them."""
    parts: list[str | Span] = []
    for part in run.parts:
        if isinstance(part, Span):
            parts.append(part)
        else:
            parts.extend(p for p in _WORDS.split(part) if p)
    return Run(tuple(parts), run.escape)


class _Segment:
    """One run climbing the ladder; ``output`` is its accepted engine-form translation."""

    def __init__(self, run: Run, engine: SegmentEngine) -> None:
        # what the model knows only as bytes is copied through, never sent: a model
        # that copies byte pieces can still slip a byte and make another valid character
        self.run = protect_unknown(run, engine.unknown_characters) or run
        self.engine = engine
        self.level: Level = "masked"
        self.output: str | None = None
        self.failed: str | None = None
        self._stripped: Stripped | None = None
        self._nodes: list[int] = []  # indices of parts sent to the engine at level "nodes"

    @property
    def verdict(self) -> Verdict:
        return _VERDICTS[self.level]

    @property
    def pending(self) -> bool:
        return self.output is None and self.failed is None

    def restart_at_nodes(self) -> None:
        self.level, self.output = "nodes", None

    def calls(self) -> list[Call]:
        if self.level == "masked":
            return [Call(self.run.engine_text())]
        if self.level == "aligned":
            self._stripped = strip_tokens(self.run, self.run.engine_text())
            return [Call(self._stripped.text, aligned=True)]
        # the last rung copies non-ASCII symbols and punctuation through as well: a
        # model can still garble a rare one it knows (¹, „) into byte pieces
        self.run = protect_unknown(self.run, _symbols) or self.run
        if self.level == "words":
            self.run = _split_words(self.run)
        self._nodes = [
            i for i, p in enumerate(self.run.parts) if isinstance(p, str) and Run((p,)).has_text()
        ]
        return [Call(str(self.run.parts[i])) for i in self._nodes]

    def feed(self, outputs: Sequence[Translation]) -> None:
        if self.level == "masked":
            self._judge(outputs[0].text)
        elif self.level == "aligned":
            out = outputs[0]
            assert isinstance(out, AlignedTranslation) and self._stripped is not None
            text = reinsert(
                self._stripped, out.text, out.source_spans, out.target_spans, out.attention
            )
            self._judge(text)
        else:
            self._judge_nodes(outputs)

    def _judge(self, text: str) -> None:
        problem = check_run(self.run, text)
        if problem is None:
            self.output = text
        elif problem != "corrupt" and self.level == "masked" and self.engine.can_align():
            self.level = "aligned"
        elif self.level != "nodes":
            self.level = "nodes"
        else:
            self.failed = problem

    def _judge_nodes(self, outputs: Sequence[Translation]) -> None:
        translated = dict(zip(self._nodes, (o.text for o in outputs), strict=True))
        pieces: list[str] = []
        index = 0
        for i, part in enumerate(self.run.parts):
            if isinstance(part, str):
                text = translated.get(i, part)
                if corrupted(part, text) or text.count("\n") != part.count("\n"):
                    if self.level == "nodes":  # one more try, word by word
                        self.level = "words"
                    else:
                        self.failed = "corrupt"
                    return
                pieces.append(text)
                continue
            pieces.append("\n" if part.kind == "newline" else token(index))
            index += 1
        self.output = "".join(pieces)


class Restoration:
    """Drives one prepared request from its first engine outputs to a final text.

    Usage: while :meth:`calls` is not empty, translate those and ``feed``
    the results; then :meth:`outcome`. The first round's calls are the
    prepared segments.
    """

    def __init__(self, prepared: Prepared, engine: SegmentEngine) -> None:
        self.prepared = prepared
        self.all_runs = prepared.runs
        self.segments = {
            i: _Segment(run, engine) for i, run in enumerate(self.all_runs) if run.has_text()
        }
        self.input_tokens = 0
        self.output_tokens = 0
        self._outcome: Restored | Failed | None = None
        self._checked_nodes = False
        self._issued: list[tuple[_Segment, int]] = []
        if not self.segments:
            self._settle()

    def calls(self) -> list[Call]:
        """Engine inputs needed next (empty when done); each round starts here."""
        self._issued = []
        if self._outcome is not None:
            return []
        out: list[Call] = []
        for seg in self.segments.values():
            if seg.pending:
                calls = seg.calls()
                self._issued.append((seg, len(calls)))
                out.extend(calls)
        return out

    def feed(self, outputs: Sequence[Translation | Refused]) -> None:
        """Give the engine's outputs for the last :meth:`calls`, in order.

        A :class:`Refused` call fails the whole request (reason ``engine_rejected``).
        """
        if len(outputs) != sum(n for _, n in self._issued):
            raise ValueError("outputs do not match the calls")
        refused = next((o for o in outputs if isinstance(o, Refused)), None)
        if refused is not None:
            self._issued = []
            self._outcome = Failed("engine_rejected", refused.error)
            return
        it = iter(o for o in outputs if isinstance(o, Translation))
        for seg, n in self._issued:
            got = [next(it) for _ in range(n)]
            for out in got:
                self.input_tokens += out.input_tokens
                self.output_tokens += out.output_tokens
            seg.feed(got)
        self._issued = []
        self._settle()

    def _settle(self) -> None:
        segments = self.segments.values()
        if any(seg.pending for seg in segments):
            return
        failed = [seg for seg in segments if seg.failed]
        if failed:
            self._outcome = Failed(
                "bad_output",
                f"{len(failed)} segment(s) could not be translated faithfully "
                f"({', '.join(sorted({str(s.failed) for s in failed}))})",
            )
            return
        outputs = [
            self.segments[i].output if i in self.segments else run.engine_text()
            for i, run in enumerate(self.all_runs)
        ]
        doc = self._doc()
        text = render(doc, [o or "" for o in outputs])
        problem = document_problem(self.prepared, text)
        if problem is None:
            exact: Verdict = "exact"
            verdict = max((s.verdict for s in segments), key=_RANK.__getitem__, default=exact)
            self._outcome = Restored(
                text, verdict, count_hits(doc), self.input_tokens, self.output_tokens
            )
        elif self._checked_nodes or all(s.level == "nodes" for s in segments):
            self._outcome = Failed("bad_output", problem)
        else:
            self._checked_nodes = True
            for seg in segments:
                seg.restart_at_nodes()

    def _doc(self) -> Doc:
        """The prepared document with each run as its segment last saw it."""
        replaced = {id(self.all_runs[i]): seg.run for i, seg in self.segments.items()}
        return _replace_runs(self.prepared.doc, replaced)

    def outcome(self) -> Restored | Failed:
        """The result; only valid once :meth:`calls` is empty."""
        if self._outcome is None:
            raise RuntimeError("restoration is not finished")
        return self._outcome


def _replace_runs(doc: Doc, replaced: dict[int, Run]) -> Doc:
    out: list[Literal | Run] = []
    for node in doc:
        if isinstance(node, Run):
            run = replaced.get(id(node), node)
            parts = tuple(
                Span(_replace_runs(p.content, replaced), p.kind, p.group, p.hit)
                if isinstance(p, Span)
                else p
                for p in run.parts
            )
            node = Run(parts, run.escape)
        out.append(node)
    return tuple(out)


def count_hits(doc: Doc) -> tuple[HitCount, ...]:
    """Glossary terms applied in ``doc``, with counts, in first-seen order."""
    counts = Counter((h.source, h.target) for h in hits(doc))
    return tuple(HitCount(source, target, n) for (source, target), n in counts.items())


def document_problem(prepared: Prepared, output: str) -> str | None:
    """Why the assembled ``output`` is not faithful to the prepared source, or None."""
    if prepared.fmt in ("html", "xml"):
        from pipeline.fidelity.markup import check_output

        return check_output(prepared.source, output, prepared.fmt)
    if prepared.fmt == "markdown":
        from pipeline.fidelity import markdown

        return markdown.check_output(prepared.source, output)
    return None
