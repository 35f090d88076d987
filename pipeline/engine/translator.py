"""The ``Translator`` interface and its CTranslate2 implementation.

Policy for awkward input, the same for every model:

* Empty (or whitespace-only) text gives an empty translation with zero token
  counts; the model is not called.
* Line breaks never reach the model: each line is translated on its own and
  the line breaks are put back where they were.
* Text longer than the model's limit (the registry's ``max_input_tokens``,
  counted in source tokens including prefix/suffix tokens) is split at
  sentence boundaries, then between words, then between characters, each
  piece translated, and the translations rejoined with the original
  whitespace. Text is never truncated, silently or otherwise
  (:mod:`pipeline.engine.segment`).
* Characters the tokenizer does not know are its business: models with
  SentencePiece byte fallback (the demo model) carry any script or emoji
  through as UTF-8 bytes; others turn them into ``<unk>``.

``translate_batch`` blocks (CTranslate2 releases the GIL while it computes);
from asyncio, call ``await translator.translate_batch_async(...)``, which runs
it in an executor.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import ctranslate2
import sentencepiece

from pipeline.engine.registry import PairEntry, Registry, check_compute_type
from pipeline.engine.segment import Piece, split_text
from pipeline.errors import ConfigError, EngineError
from pipeline.pairs import Pair

if TYPE_CHECKING:
    from pipeline.settings import EngineSettings

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True, slots=True)
class Translation:
    """One translated text with the token counts the model saw and produced."""

    text: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class AlignedTranslation(Translation):
    """A translation with the model's attention between source and target tokens.

    ``source_spans[j]`` / ``target_spans[i]`` are the character ranges of
    source token ``j`` in the input text and of target token ``i`` in
    ``text``; ``attention[i][j]`` is how much target token ``i`` attended to
    source token ``j`` (prefix/suffix tokens left out).
    """

    source_spans: tuple[tuple[int, int], ...] = ()
    target_spans: tuple[tuple[int, int], ...] = ()
    attention: tuple[tuple[float, ...], ...] = ()


class Translator(Protocol):
    """Translates batches of texts for the pairs it serves."""

    model_id: str

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        """Translate ``texts`` (one pair); results in input order. Blocks."""
        ...

    def count_tokens(self, text: str, pair: Pair) -> int:
        """Source tokens ``text`` costs the model (what token budgets count)."""
        ...

    async def translate_batch_async(
        self, texts: Sequence[str], pair: Pair, executor: Executor | None = None
    ) -> list[Translation]:
        """``translate_batch`` off the event loop, in ``executor`` (default: the loop's)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(self.translate_batch, list(texts), pair)
        return await loop.run_in_executor(executor, call)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when CTranslate2 sees a GPU, else ``cpu``."""
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device != "auto":
        return device
    return "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"


def resolve_compute_type(compute_type: str, device: str) -> str:
    """``auto`` -> ``int8_float16`` on CUDA, ``int8`` on CPU; explicit types are checked."""
    check_compute_type(compute_type, "compute_type")
    if compute_type == "auto":
        return "int8_float16" if device == "cuda" else "int8"
    supported = ctranslate2.get_supported_compute_types(device)
    if compute_type != "default" and compute_type not in supported:
        log.warning(
            "compute_type %s is not supported on %s (supported: %s); CTranslate2 will "
            "fall back to the closest one",
            compute_type,
            device,
            ", ".join(sorted(supported)),
        )
    return compute_type


class _Piece(Protocol):
    piece: str
    begin: int  # byte offsets into the text
    end: int


class _PieceText(Protocol):
    """SentencePiece's ``out_type="proto"`` result: the text and its pieces with offsets."""

    text: str
    pieces: Sequence[_Piece]


@dataclass(frozen=True, slots=True)
class _Loaded:
    entry: PairEntry
    model: ctranslate2.Translator
    source_sp: sentencepiece.SentencePieceProcessor
    target_sp: sentencepiece.SentencePieceProcessor


class CTranslate2Translator(Translator):
    """CTranslate2 + SentencePiece translator for one or more registry pairs.

    Pairs whose entries name the same model directory and compute type share
    one loaded model; tokenizers are shared by file. ``model_ids`` maps each
    pair id to its registry ``model_id`` (what cache digests and results name);
    ``model_id`` joins the distinct ones.
    """

    def __init__(
        self,
        entries: Iterable[PairEntry],
        *,
        device: str = "auto",
        compute_type: str | None = None,
        inter_threads: int = 1,
        intra_threads: int = 0,
        beam_size: int = 1,
        max_batch_tokens: int = 4096,
        decoding_ratio: float = 2.0,
    ) -> None:
        """Load the models of ``entries``.

        ``compute_type`` overrides every entry's own; ``max_batch_tokens`` is
        CTranslate2's ``max_batch_size`` with ``batch_type="tokens"``; the
        output may be up to ``decoding_ratio`` times the input plus 16 tokens.
        """
        if beam_size < 1 or max_batch_tokens < 1 or inter_threads < 1 or intra_threads < 0:
            raise ConfigError(
                "beam_size, max_batch_tokens and inter_threads must be >= 1, intra_threads >= 0"
            )
        self.device = resolve_device(device)
        self.beam_size = beam_size
        self.max_batch_tokens = max_batch_tokens
        self.decoding_ratio = decoding_ratio
        self.inter_threads = inter_threads
        self.intra_threads = intra_threads
        models: dict[tuple[Path, str], ctranslate2.Translator] = {}
        tokenizers: dict[Path, sentencepiece.SentencePieceProcessor] = {}
        self._pairs: dict[str, _Loaded] = {}
        self.compute_types: dict[str, str] = {}
        for entry in entries:
            problems = entry.problems()
            if problems:
                raise ConfigError(f"pair {entry.pair.id}: " + "; ".join(problems))
            ctype = resolve_compute_type(compute_type or entry.compute_type, self.device)
            key = (entry.model_dir, ctype)
            if key not in models:
                log.info("loading %s on %s (%s)", entry.model_dir, self.device, ctype)
                try:
                    models[key] = ctranslate2.Translator(
                        str(entry.model_dir),
                        device=self.device,
                        compute_type=ctype,
                        inter_threads=inter_threads,
                        intra_threads=intra_threads,
                    )
                except (RuntimeError, ValueError) as exc:
                    raise EngineError(f"cannot load {entry.model_dir}: {exc}") from exc
            for path in (entry.source_tokenizer, entry.target_tokenizer):
                if path not in tokenizers:
                    try:
                        tokenizers[path] = sentencepiece.SentencePieceProcessor(
                            model_file=str(path)
                        )
                    except (OSError, RuntimeError) as exc:
                        raise EngineError(f"cannot load tokenizer {path}: {exc}") from exc
            self._pairs[entry.pair.id] = _Loaded(
                entry,
                models[key],
                tokenizers[entry.source_tokenizer],
                tokenizers[entry.target_tokenizer],
            )
            self.compute_types[entry.pair.id] = ctype
        if not self._pairs:
            raise ConfigError("no pairs to serve")
        self.model_ids = {pid: p.entry.model_id for pid, p in self._pairs.items()}
        self._known_chars: dict[str, dict[str, bool]] = {}  # pair id -> char -> known
        self.model_id = "+".join(sorted(set(self.model_ids.values())))

    @classmethod
    def from_settings(
        cls, settings: EngineSettings, pairs: Iterable[Pair | str] | None = None
    ) -> CTranslate2Translator:
        """Load the registry named in ``settings`` and only the ``pairs`` asked for."""
        registry = Registry.load(settings.registry)
        return cls(
            registry.entries(pairs),
            device=settings.device,
            compute_type=settings.compute_type,
            inter_threads=settings.inter_threads,
            intra_threads=settings.intra_threads,
            beam_size=settings.beam_size,
            max_batch_tokens=settings.max_batch_tokens,
        )

    @property
    def pairs(self) -> list[str]:
        """Pair ids this translator serves."""
        return sorted(self._pairs)

    def count_tokens(self, text: str, pair: Pair) -> int:
        """Source tokens of ``text``, prefix and suffix tokens included (0 for empty text)."""
        loaded = self._loaded(pair)
        return sum(
            self._core_tokens(loaded, piece.core)
            for piece in split_text(
                text, functools.partial(self._core_tokens, loaded), loaded.entry.max_input_tokens
            )
            if piece.core
        )

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        """Translate ``texts`` for ``pair``; the result has one Translation per text, in order."""
        loaded = self._loaded(pair)
        entry = loaded.entry
        count = functools.partial(self._core_tokens, loaded)
        pieces = [split_text(text, count, entry.max_input_tokens) for text in texts]
        sources: list[list[str]] = []
        for text_pieces in pieces:
            for piece in text_pieces:
                if piece.core:
                    tokens = loaded.source_sp.encode(piece.core, out_type=str)
                    sources.append([*entry.source_prefix, *tokens, *entry.source_suffix])
        outputs = self._run(loaded, sources) if sources else []
        results: list[Translation] = []
        it = iter(zip(sources, outputs, strict=True))
        for text_pieces in pieces:
            parts: list[str] = []
            n_in = n_out = 0
            for piece in text_pieces:
                if not piece.core:
                    parts.append(piece.lead)
                    continue
                source, (out_text, out_tokens) = next(it)
                parts.extend((piece.lead, out_text, piece.trail))
                n_in += len(source)
                n_out += out_tokens
            text = "".join(parts) if n_in else ""
            results.append(Translation(text, n_in, n_out))
        return results

    def _run(self, loaded: _Loaded, sources: list[list[str]]) -> list[tuple[str, int]]:
        entry = loaded.entry
        prefix = list(entry.target_prefix)
        longest = max(len(s) for s in sources)
        try:
            results = loaded.model.translate_batch(
                sources,
                target_prefix=[prefix] * len(sources) if prefix else None,
                max_batch_size=self.max_batch_tokens,
                batch_type="tokens",
                beam_size=self.beam_size,
                max_input_length=0,  # never truncate; long texts were split above
                suppress_sequences=[[t] for t in entry.suppress_tokens] or None,
                # Never past the model's positions, whatever the input length.
                max_decoding_length=min(
                    int(longest * self.decoding_ratio) + 16 + len(prefix),
                    entry.max_output_tokens,
                ),
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"{entry.pair.id}: translation failed: {exc}") from exc
        out: list[tuple[str, int]] = []
        for result in results:
            tokens = result.hypotheses[0]
            if prefix and tokens[: len(prefix)] == prefix:
                tokens = tokens[len(prefix) :]
            out.append((loaded.target_sp.decode_pieces(tokens), len(tokens)))
        return out

    def translate_aligned(self, texts: Sequence[str], pair: Pair) -> list[AlignedTranslation]:
        """Like :meth:`translate_batch`, with CTranslate2's ``return_attention`` alignment.

        Used by the fidelity layer to put back placeholders a model dropped;
        each text is split and rejoined by the same policy as ``translate_batch``.
        """
        loaded = self._loaded(pair)
        entry = loaded.entry
        count = functools.partial(self._core_tokens, loaded)
        jobs: list[tuple[int, int, Piece, _PieceText]] = []
        for t, text in enumerate(texts):
            offset = 0
            for piece in split_text(text, count, entry.max_input_tokens):
                if piece.core:
                    proto = loaded.source_sp.encode(piece.core, out_type="proto")
                    jobs.append((t, offset + len(piece.lead), piece, proto))
                offset += len(piece.lead) + len(piece.core) + len(piece.trail)
        sources = [
            [*entry.source_prefix, *(p.piece for p in proto.pieces), *entry.source_suffix]
            for _, _, _, proto in jobs
        ]
        prefix = list(entry.target_prefix)
        results = self._call_model(loaded, sources, return_attention=True) if sources else []
        parts: list[list[str]] = [[] for _ in texts]
        spans: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]] = [([], []) for _ in texts]
        blocks: list[list[tuple[int, int, list[list[float]]]]] = [[] for _ in texts]
        n_in = [0] * len(texts)
        n_out = [0] * len(texts)
        job_iter = iter(zip(jobs, sources, results, strict=True))
        for t, text in enumerate(texts):
            for piece in split_text(text, count, entry.max_input_tokens):
                if not piece.core:
                    parts[t].append(piece.lead)
                    continue
                (_, src_offset, _, proto), source, result = next(job_iter)
                tokens = list(result.hypotheses[0])
                rows = list(result.attention[0])
                if prefix and tokens[: len(prefix)] == prefix:
                    tokens, rows = tokens[len(prefix) :], rows[len(prefix) :]
                ids = [loaded.target_sp.piece_to_id(tok) for tok in tokens]
                decoded = loaded.target_sp.decode(ids, out_type="proto")
                parts[t].append(piece.lead)
                tgt_offset = sum(len(x) for x in parts[t])
                parts[t].extend((decoded.text, piece.trail))
                src_spans, tgt_spans = spans[t]
                first_src, first_tgt = len(src_spans), len(tgt_spans)
                src_spans.extend(_char_spans(piece.core, proto, src_offset))
                tgt_spans.extend(_char_spans(decoded.text, decoded, tgt_offset))
                lo = len(entry.source_prefix)
                cols = slice(lo, lo + len(proto.pieces))
                blocks[t].append((first_src, first_tgt, [list(r[cols]) for r in rows]))
                n_in[t] += len(source)
                n_out[t] += len(tokens)
        out: list[AlignedTranslation] = []
        for t in range(len(texts)):
            src_spans, tgt_spans = spans[t]
            matrix = [[0.0] * len(src_spans) for _ in tgt_spans]
            for first_src, first_tgt, rows in blocks[t]:
                for i, row in enumerate(rows):
                    matrix[first_tgt + i][first_src : first_src + len(row)] = row
            out.append(
                AlignedTranslation(
                    "".join(parts[t]) if n_in[t] else "",
                    n_in[t],
                    n_out[t],
                    tuple(src_spans),
                    tuple(tgt_spans),
                    tuple(tuple(r) for r in matrix),
                )
            )
        return out

    def unknown_characters(self, text: str, pair: Pair) -> frozenset[str]:
        """Characters of ``text`` the source tokenizer knows only as bytes or ``<unk>``."""
        known = self._known_chars.setdefault(pair.id, {})
        sp = self._loaded(pair).source_sp
        for ch in set(text) - known.keys():
            ids = sp.encode(ch) if not ch.isspace() else []
            known[ch] = not any(sp.is_byte(i) or sp.is_unknown(i) for i in ids)
        return frozenset(ch for ch in set(text) if not known[ch])

    def _call_model(
        self, loaded: _Loaded, sources: list[list[str]], **options: bool
    ) -> list[ctranslate2.TranslationResult]:
        entry = loaded.entry
        prefix = list(entry.target_prefix)
        longest = max(len(s) for s in sources)
        try:
            return list(
                loaded.model.translate_batch(
                    sources,
                    target_prefix=[prefix] * len(sources) if prefix else None,
                    max_batch_size=self.max_batch_tokens,
                    batch_type="tokens",
                    beam_size=self.beam_size,
                    max_input_length=0,
                    suppress_sequences=[[t] for t in entry.suppress_tokens] or None,
                    max_decoding_length=min(
                        int(longest * self.decoding_ratio) + 16 + len(prefix),
                        entry.max_output_tokens,
                    ),
                    **options,
                )
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"{entry.pair.id}: translation failed: {exc}") from exc

    @staticmethod
    def _core_tokens(loaded: _Loaded, core: str) -> int:
        entry = loaded.entry
        n = len(loaded.source_sp.encode(core)) if core else 0
        return n + len(entry.source_prefix) + len(entry.source_suffix) if n else 0

    def _loaded(self, pair: Pair) -> _Loaded:
        loaded = self._pairs.get(pair.id)
        if loaded is None:
            raise EngineError(
                f"pair {pair.id} is not served here (serving: {', '.join(self.pairs)})"
            )
        return loaded


def _char_spans(text: str, proto: _PieceText, offset: int) -> list[tuple[int, int]]:
    """Character ranges (shifted by ``offset``) of a SentencePiece proto's byte ranges."""
    char_at = [0]
    for i, ch in enumerate(text):
        char_at.extend([i + 1] * len(ch.encode("utf-8")))
    last = len(char_at) - 1
    return [
        (offset + char_at[min(p.begin, last)], offset + char_at[min(p.end, last)])
        for p in proto.pieces
    ]
