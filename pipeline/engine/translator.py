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

Tokenisation happens once per text: :meth:`CTranslate2Translator.prepare`
cuts and tokenises texts into :class:`PreparedText` (pieces and their source
tokens, and the token count budgets and batching plan with), and
:meth:`~CTranslate2Translator.translate_prepared` hands those tokens straight
to the model. The two halves of an engine call — :meth:`encode` (prepared
texts to source token lists, CPU-light) and :meth:`run` (the model, which
releases the GIL) and :meth:`assemble` (detokenise, rejoin pieces) — are
public so :mod:`pipeline.engine.overlap` can run them in separate executors
and overlap one sub-batch's model call with its neighbours' preparation.

How long the output may be is the registry entry's ``decoding``: ``free``
stops at the model's ``</s>``, capped at twice the longest input plus 16
tokens (and the model's ``max_output_tokens``); ``input_length`` (random-weight
benchmark models, which never choose ``</s>``) decodes as many tokens as each
sequence's own source: the call runs as many steps as its longest source, and
a sequence leaves the batch when it has its own length, as a real model's does
at its ``</s>`` (greedy search; with beams every sequence decodes as long as
the call's longest, CTranslate2 having no step callback for beam search).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import ctranslate2
import numpy as np
import sentencepiece
from cachetools import LRUCache

from pipeline.contract.digest import files_fingerprint
from pipeline.contract.pairs import Pair
from pipeline.engine.costs import DEFAULT_COST, CostModel
from pipeline.engine.gpu_runtime import load_cublas
from pipeline.engine.profile import (
    EngineProfile,
    ProfileCache,
    candidates,
    fitting_profile,
    machine_key,
    measure_profile,
)
from pipeline.engine.registry import ModelEntry, PairEntry, Registry, check_compute_type, models_of
from pipeline.engine.replicas import ReplicaPlan, choose_plan, concurrent_throughput, sweep
from pipeline.engine.segment import Piece, split_text
from pipeline.errors import ConfigError, EngineError
from pipeline.observability import metrics
from pipeline.sample_sentences import SentenceGenerator

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


@dataclass(frozen=True, slots=True, eq=False)
class AttentionBlock:
    """How much each of a run of target tokens attended to each of a run of source tokens.

    ``weights[i][j]`` is target token ``first_target + i`` on source token
    ``first_source + j``. One block per piece the engine translated apart: a
    long text's attention is block-diagonal, and a dense matrix of it grows
    with the square of the text.
    """

    first_target: int
    first_source: int
    weights: np.ndarray[tuple[int, int], np.dtype[np.float32]]


@dataclass(frozen=True, slots=True)
class AlignedTranslation(Translation):
    """A translation with the model's attention between source and target tokens.

    ``source_spans[j]`` / ``target_spans[i]`` are the character ranges of
    source token ``j`` in the input text and of target token ``i`` in
    ``text``, in text order; ``attention`` holds how much target token ``i``
    attended to source token ``j`` (prefix/suffix tokens left out), in blocks;
    a pair of tokens in no block attended nothing to each other.
    """

    source_spans: tuple[tuple[int, int], ...] = ()
    target_spans: tuple[tuple[int, int], ...] = ()
    attention: tuple[AttentionBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedText:
    """One text cut into pieces, each non-empty core tokenised once.

    ``sources`` holds the model input of each piece with a core (prefix and
    suffix tokens included), in piece order; ``tokens`` is their total
    (what token budgets count), ``longest`` the longest of them (what a call
    pads to).
    """

    pieces: tuple[Piece, ...]
    sources: tuple[tuple[str, ...], ...]
    # the pair it is translated for: its target prefix and target tokenizer
    pair: Pair

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.sources)

    @property
    def longest(self) -> int:
        return max((len(s) for s in self.sources), default=0)


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
    """``auto`` -> ``cuda`` when CTranslate2 sees a GPU it can use, else ``cpu``.

    A GPU is usable once cuBLAS 12 loads (:mod:`pipeline.engine.gpu_runtime`): when it
    does not, ``cuda`` is refused and ``auto`` falls back to the CPU, each with one line
    naming the fix, instead of an error at the first batch.
    """
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return device
    if ctranslate2.get_cuda_device_count() == 0:
        if device == "cuda":
            raise ConfigError("engine.device=cuda, but CTranslate2 sees no GPU on this host")
        return "cpu"
    cublas = load_cublas()
    if cublas.problem is not None:
        if device == "cuda":
            raise ConfigError(f"a GPU is visible but the engine cannot use it: {cublas.problem}")
        log.warning(
            "a GPU is visible but the engine cannot use it: %s; using the CPU", cublas.problem
        )
        return "cpu"
    return "cuda"


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
    """What translating one pair needs: its entry, tokenizers and model."""

    entry: PairEntry
    model_id: str
    source_sp: sentencepiece.SentencePieceProcessor
    target_sp: sentencepiece.SentencePieceProcessor


@dataclass(slots=True)
class _Model:
    """One CTranslate2 model: loaded on first use, unloaded when the budget needs room."""

    entry: ModelEntry
    bytes: int
    translator: ctranslate2.Translator | None = None
    compute_type: str = "unknown"
    cost: CostModel = DEFAULT_COST
    profile: EngineProfile | None = None
    calls: int = 0  # under way now (never unloaded then)
    used: float = 0.0  # when it was last called (time.monotonic())
    loads: int = 0


@dataclass(frozen=True, slots=True)
class CallKey:
    """What every sequence of one CTranslate2 call must share: the model and how it decodes."""

    model_id: str
    suppress_tokens: tuple[str, ...]
    decoding: str
    max_output_tokens: int


@dataclass(frozen=True, slots=True)
class EngineCall:
    """The input of one model call: source tokens and each one's target prefix."""

    key: CallKey
    sources: list[list[str]]
    prefixes: list[list[str]]


class ShapeProbe:
    """Calls of a given shape on one loaded model (for compute-type choice and call costs)."""

    def __init__(self, model: ctranslate2.Translator, entry: PairEntry, words: list[str]) -> None:
        self._model = model
        self._prefix = list(entry.target_prefix)
        self._words = words

    def run(self, n: int, max_len: int) -> None:
        # Real pieces, different per sequence; output forced to max_len tokens,
        # so the call's work does not depend on what the weights would say.
        batch = [self._words[i : i + max_len] for i in range(n)]
        steps = max_len + len(self._prefix)
        self._model.translate_batch(
            batch,
            target_prefix=[self._prefix] * n if self._prefix else None,
            beam_size=1,
            max_input_length=0,
            min_decoding_length=steps,
            max_decoding_length=steps,
        )


class CTranslate2Translator(Translator):
    """CTranslate2 + SentencePiece translator for the pairs of one or more registry models.

    Texts of every pair one model serves share its calls: each sequence
    carries its own target prefix (:class:`CallKey` says what a call's
    sequences must share). Tokenizers are shared by file; a pair's entry is
    resolved on first use (a multilingual model may serve thousands).

    With ``max_loaded_models`` or ``max_loaded_bytes`` (the ``model.bin`` size)
    a model is loaded on first use and the least recently used idle one is
    unloaded when the budget needs room; a call for a cold model waits for
    its load (counted in ``babelstream_model_load_seconds``). Without a budget
    every model is loaded at start.
    """

    def __init__(
        self,
        entries: Iterable[PairEntry | ModelEntry],
        *,
        device: str = "auto",
        compute_type: str | None = None,
        inter_threads: int = 1,
        intra_threads: int = 0,
        beam_size: int = 1,
        max_batch_tokens: int = 4096,
        decoding_ratio: float = 2.0,
        profiles: ProfileCache | None = None,
        profile_shape: tuple[int, int] = (32, 24),
        profile_seconds: float = 2.0,
        max_loaded_models: int | None = None,
        max_loaded_bytes: int | None = None,
        prepared_texts: int = 4096,
    ) -> None:
        """Load the models of ``entries`` (pair entries of one model form that model).

        ``compute_type`` overrides every entry's own; ``max_batch_tokens`` is
        CTranslate2's ``max_batch_size`` with ``batch_type="tokens"``; the
        output may be up to ``decoding_ratio`` times the input plus 16 tokens.
        With ``profiles``, each model's compute type (when ``auto``) and call
        costs are measured, or read from that cache (see
        :mod:`pipeline.engine.profile`); without, ``auto`` is ``int8`` on CPU
        and ``int8_float16`` on GPU, and call costs are a rough default.
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
        # on a GPU with inter_threads unset: the measured replicas and call size
        self.replica_plan: ReplicaPlan | None = None
        self.intra_threads = intra_threads
        self._compute_type = compute_type
        self._profiles = profiles
        self._profile_shape = profile_shape
        self._profile_seconds = profile_seconds
        self._max_models = max_loaded_models
        self._max_bytes = max_loaded_bytes
        self._known_chars: dict[str, dict[str, bool]] = {}  # pair id -> char -> known
        # The fair-share agent counts a request's tokens as it is fetched, to sort rounds
        # by length; its engine call then finds the text prepared instead of tokenising
        # it again. Prepared from threads (the engine's, the agent's counting): a lock.
        self._prepared: LRUCache[tuple[str, str], PreparedText] | None = (
            LRUCache(prepared_texts) if prepared_texts > 0 else None
        )
        self._prepared_lock = threading.Lock()
        self._tokenizers: dict[Path, sentencepiece.SentencePieceProcessor] = {}
        self._pairs: dict[str, _Loaded] = {}
        self._lock = threading.RLock()  # loads, unloads and call counts
        self._models: dict[str, _Model] = {}
        for model in models_of(entries):
            problems = model.problems()
            if problems:
                raise ConfigError(f"model {model.model_id}: " + "; ".join(problems))
            size = (model.model_dir / "model.bin").stat().st_size
            self._models[model.model_id] = _Model(model, size)
        if not self._models:
            raise ConfigError("no pairs to serve")
        self.model_id = "+".join(sorted(self._models))
        if self._max_models is None and self._max_bytes is None:
            for loaded in self._models.values():
                self._ensure_loaded(loaded)

    @classmethod
    def from_settings(
        cls,
        settings: EngineSettings,
        pairs: Iterable[Pair | str] | None = None,
        models: Iterable[str] | None = None,
    ) -> CTranslate2Translator:
        """Load the registry named in ``settings`` and only the models asked for (by id, or
        serving ``pairs``; every model when both are None)."""
        registry = Registry.load(settings.registry)
        device = resolve_device(settings.device)
        replicas, per_replica = settings.threads(device)
        chosen = registry.models_for(models, pairs)
        plan = None
        if device == "cuda" and settings.inter_threads is None and settings.profile and chosen:
            plan = measured_replica_plan(chosen[0].any_entry(), device, settings)
            replicas, per_replica = plan.replicas, 1
        kind = EchoTranslator if settings.backend == "echo" else cls
        translator = kind(
            chosen,
            device=device,
            compute_type=settings.compute_type,
            inter_threads=replicas,
            intra_threads=per_replica,
            beam_size=settings.beam_size,
            max_batch_tokens=settings.max_batch_tokens,
            profiles=ProfileCache(settings.profile_cache) if settings.profile else None,
            profile_shape=settings.profile_shape,
            profile_seconds=settings.profile_seconds,
            max_loaded_models=settings.max_loaded_models,
            max_loaded_bytes=settings.max_loaded_bytes,
            prepared_texts=settings.prepared_texts,
        )
        translator.replica_plan = plan
        return translator

    def in_use(self) -> dict[str, Any]:
        """What the engine runs on, for readiness and ``status``: device, replicas, threads
        per replica, each model's compute type, and where cuBLAS came from on a GPU."""
        described: dict[str, Any] = {
            "device": self.device,
            "replicas": self.inter_threads,
            "threads_per_replica": self.intra_threads,
            "compute_types": {
                m.model_id: self.compute_type(m.any_entry().pair) for m in self.models
            },
        }
        if self.device == "cuda":
            described["cublas"] = load_cublas().loaded_from
        if self.replica_plan is not None:
            described["replica_plan"] = self.replica_plan.to_json()
        return described

    @property
    def models(self) -> list[ModelEntry]:
        """The models this translator serves."""
        return [m.entry for m in self._models.values()]

    def loaded_models(self) -> list[str]:
        """The ids of the models loaded now."""
        with self._lock:
            return [mid for mid, m in self._models.items() if m.translator is not None]

    def compute_type(self, pair: Pair) -> str:
        """The compute type ``pair``'s model runs at ("unknown" until it is loaded)."""
        return self._model_of(pair).compute_type

    def profile(self, pair: Pair) -> EngineProfile | None:
        """The measured profile of ``pair``'s model, once it is loaded with profiles on."""
        return self._model_of(pair).profile

    def serves(self, pair: Pair) -> bool:
        return any(m.entry.serves(pair) for m in self._models.values())

    def _requested(self, model: _Model) -> str:
        """The compute type asked for: the worker's setting, else the model's registry entry."""
        return self._compute_type or model.entry.compute_type

    def _ensure_loaded(self, model: _Model) -> ctranslate2.Translator:
        """The model's CTranslate2 translator, loaded now if it is not (blocks)."""
        with self._lock:
            if model.translator is not None:
                return model.translator
            self._make_room(model)
            began = time.perf_counter()
            requested = self._requested(model)
            first = model.entry.any_entry()
            tokenizer = self._tokenizer(first.source_tokenizer)
            if self._profiles is None:
                ctype = resolve_compute_type(requested, self.device)
                model.translator, model.compute_type = self._open(first, ctype), ctype
            else:
                profile = self._profile(first, requested, tokenizer, self._profiles)
                model.translator = self._open(first, profile.compute_type)
                model.compute_type, model.cost, model.profile = (
                    profile.compute_type,
                    profile.cost,
                    profile,
                )
            model.loads += 1
            seconds = time.perf_counter() - began
            metrics.record_model_load(model.entry.model_id, seconds)
            if model.loads > 1 or self._max_models is not None or self._max_bytes is not None:
                log.info("loaded model %s in %.2fs", model.entry.model_id, seconds)
            return model.translator

    @property
    def budgeted(self) -> bool:
        """Whether a memory budget bounds the models loaded at once."""
        return self._max_models is not None or self._max_bytes is not None

    def fits(self, models: Collection[str]) -> bool:
        """Whether the models named (ids this translator serves) fit the budget together."""
        chosen = [self._models[m] for m in models if m in self._models]
        return (self._max_models is None or len(chosen) <= self._max_models) and (
            self._max_bytes is None or sum(m.bytes for m in chosen) <= self._max_bytes
        )

    def unload(self, model_id: str) -> bool:
        """Unload ``model_id`` when it is loaded and no call uses it; whether it was."""
        with self._lock:
            model = self._models[model_id]
            if model.translator is None or model.calls:
                return False
            self._unload(model, "to make room for a model with work waiting")
            return True

    def _unload(self, victim: _Model, why: str) -> None:
        assert victim.translator is not None
        del victim.translator  # frees its weights once no call holds a reference
        victim.translator = None
        metrics.record_model_eviction(victim.entry.model_id)
        log.info("unloaded model %s %s", victim.entry.model_id, why)

    def _make_room(self, wanted: _Model) -> None:
        """Unload least recently used idle models until ``wanted`` fits the budget."""

        def over() -> bool:
            loaded = [m for m in self._models.values() if m.translator is not None]
            return not self.fits([m.entry.model_id for m in [*loaded, wanted]])

        while over():
            idle = sorted(
                (m for m in self._models.values() if m.translator is not None and not m.calls),
                key=lambda m: m.used,
            )
            if not idle:
                log.warning(
                    "model budget exceeded: every loaded model is computing; loading %s anyway",
                    wanted.entry.model_id,
                )
                return
            self._unload(idle[0], f"to make room for {wanted.entry.model_id}")

    def _tokenizer(self, path: Path) -> sentencepiece.SentencePieceProcessor:
        with self._lock:
            if path not in self._tokenizers:
                try:
                    self._tokenizers[path] = sentencepiece.SentencePieceProcessor(
                        model_file=str(path)
                    )
                except (OSError, RuntimeError) as exc:
                    raise EngineError(f"cannot load tokenizer {path}: {exc}") from exc
            return self._tokenizers[path]

    def _profile(
        self,
        entry: PairEntry,
        requested: str,
        tokenizer: sentencepiece.SentencePieceProcessor,
        cache: ProfileCache,
    ) -> EngineProfile:
        """The cached profile of this model on this machine, or a fresh measurement."""
        check_compute_type(requested, entry.model_id)
        profile = fitting_profile(
            cache,
            self._profile_key(entry, requested),
            lambda: self._measure(entry, requested, tokenizer),
            name=entry.model_dir.name,
        )
        log.info(
            "%s: compute_type %s%s; call cost %.2f ms + %.3f ms/step + %.4f ms/padded token",
            entry.model_dir.name,
            profile.compute_type,
            f" (padded tokens/s measured: {profile.tokens_per_s})" if profile.tokens_per_s else "",
            profile.cost.per_call_s * 1e3,
            profile.cost.per_step_s * 1e3,
            profile.cost.per_token_s * 1e3,
        )
        return profile

    def profile_key(self, pair: Pair) -> str:
        """The key ``pair``'s model's profile is cached under: model file, compute type asked
        for, machine, threads and call shape (a change to any of them measures again)."""
        model = self._model_of(pair)
        return self._profile_key(model.entry.any_entry(), self._requested(model))

    def _profile_key(self, entry: PairEntry, requested: str) -> str:
        return "|".join(
            (
                files_fingerprint([entry.model_dir / "model.bin"]),
                requested,
                machine_key(self.device, self.inter_threads, self.intra_threads),
                "shape={}x{}".format(*self._profile_shape),
            )
        )

    def _measure(
        self, entry: PairEntry, requested: str, tokenizer: sentencepiece.SentencePieceProcessor
    ) -> EngineProfile:
        """Choose the compute type (when ``requested`` is ``auto``) and time the call shapes."""
        supported = ctranslate2.get_supported_compute_types(self.device)
        types = candidates(self.device, supported) or [resolve_compute_type("auto", self.device)]
        log.info(
            "measuring %s on %s (%s)",
            entry.model_dir,
            self.device,
            ", ".join(types) if requested == "auto" else requested,
        )
        words = probe_words(tokenizer)
        return measure_profile(
            requested,
            types,
            lambda ctype: ShapeProbe(self._open(entry, ctype), entry, words),
            shape=self._profile_shape,
            min_seconds=self._profile_seconds,
        )

    def _open(self, entry: PairEntry, ctype: str) -> ctranslate2.Translator:
        log.info("loading %s on %s (%s)", entry.model_dir, self.device, ctype)
        try:
            return ctranslate2.Translator(
                str(entry.model_dir),
                device=self.device,
                compute_type=ctype,
                inter_threads=self.inter_threads,
                intra_threads=self.intra_threads,
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"cannot load {entry.model_dir}: {exc}") from exc

    def cost_model(self, pair: Pair) -> CostModel:
        """What one engine call of ``pair``'s model costs (measured, or the default)."""
        model = self._model_of(pair)
        if self._profiles is not None:
            self._ensure_loaded(model)  # the cost is measured when the model is loaded
        return model.cost

    def call_key(self, pair: Pair) -> CallKey:
        """What a call holding ``pair``'s texts shares with every other sequence in it."""
        loaded = self._loaded(pair)
        entry = loaded.entry
        return CallKey(
            loaded.model_id, entry.suppress_tokens, entry.decoding, entry.max_output_tokens
        )

    def count_tokens(self, text: str, pair: Pair) -> int:
        """Source tokens of ``text``, prefix and suffix tokens included (0 for empty text)."""
        return self.prepare([text], [pair])[0].tokens

    def prepare(self, texts: Sequence[str], pairs: Sequence[Pair]) -> list[PreparedText]:
        """Cut each text into pieces the model can take and tokenise each piece once
        (``pairs[i]`` is the pair of ``texts[i]``)."""
        prepared = []
        for text, pair in zip(texts, pairs, strict=True):
            known = self._prepared_before(text, pair)
            if known is not None:
                prepared.append(known)
                continue
            loaded = self._loaded(pair)
            entry = loaded.entry
            pieces: dict[str, list[str]] = {}

            def tokens_of(
                core: str, pieces: dict[str, list[str]] = pieces, loaded: _Loaded = loaded
            ) -> list[str]:
                if core not in pieces:
                    pieces[core] = loaded.source_sp.encode(core, out_type=str) if core else []
                return pieces[core]

            def count(core: str, entry: PairEntry = entry) -> int:
                n = len(tokens_of(core))
                return n + len(entry.source_prefix) + len(entry.source_suffix) if n else 0

            cut = split_text(text, count, entry.max_input_tokens)
            sources = tuple(
                (*entry.source_prefix, *tokens_of(piece.core), *entry.source_suffix)
                for piece in cut
                if piece.core
            )
            prepared.append(PreparedText(tuple(cut), sources, pair))
            if self._prepared is not None:
                with self._prepared_lock:
                    self._prepared[(text, pair.id)] = prepared[-1]
        return prepared

    def _prepared_before(self, text: str, pair: Pair) -> PreparedText | None:
        if self._prepared is None:
            return None
        with self._prepared_lock:
            return self._prepared.get((text, pair.id))

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        """Translate ``texts`` for ``pair``; the result has one Translation per text, in order."""
        return self.translate_prepared(self.prepare(texts, [pair] * len(texts)))

    def translate_prepared(self, prepared: Sequence[PreparedText]) -> list[Translation]:
        """Translate already prepared texts (no second tokenisation); results in order.

        Texts whose pairs need calls of their own (:meth:`call_key`) are called apart.
        """
        out: list[Translation | None] = [None] * len(prepared)
        groups: dict[CallKey, list[int]] = {}
        for i, text in enumerate(prepared):
            groups.setdefault(self.call_key(text.pair), []).append(i)
        for indices in groups.values():
            part = [prepared[i] for i in indices]
            call = self.encode(part)
            outputs = self.run(call) if call.sources else []
            for i, done in zip(indices, self.assemble(part, outputs), strict=True):
                out[i] = done
        return [t for t in out if t is not None]

    def encode(self, prepared: Sequence[PreparedText]) -> EngineCall:
        """The model input of one call: every piece of every text, in order, each with its
        pair's target prefix (the texts must share a :meth:`call_key`)."""
        if not prepared:
            return EngineCall(CallKey("", (), "free", 0), [], [])
        sources, prefixes = [], []
        for text in prepared:
            prefix = list(self._loaded(text.pair).entry.target_prefix)
            for source in text.sources:
                sources.append(list(source))
                prefixes.append(prefix)
        return EngineCall(self.call_key(prepared[0].pair), sources, prefixes)

    def assemble(
        self, prepared: Sequence[PreparedText], outputs: Sequence[list[str]]
    ) -> list[Translation]:
        """Detokenise ``run``'s output tokens and rejoin each text's pieces."""
        it = iter(outputs)
        results: list[Translation] = []
        for text in prepared:
            target_sp = self._loaded(text.pair).target_sp
            parts: list[str] = []
            n_out = 0
            for piece in text.pieces:
                if not piece.core:
                    parts.append(piece.lead)
                    continue
                tokens = next(it)
                parts.extend((piece.lead, target_sp.decode_pieces(tokens), piece.trail))
                n_out += len(tokens)
            n_in = text.tokens
            results.append(Translation("".join(parts) if n_in else "", n_in, n_out))
        return results

    def run(self, call: EngineCall) -> list[list[str]]:
        """One model call; the output tokens, each sequence's prefix removed. Blocks."""
        out: list[list[str]] = []
        for result, prefix in zip(self._call(call), call.prefixes, strict=True):
            tokens = result.hypotheses[0]
            if prefix and tokens[: len(prefix)] == prefix:
                tokens = tokens[len(prefix) :]
            out.append(tokens)
        return out

    def _call(self, call: EngineCall, **options: bool) -> list[ctranslate2.TranslationResult]:
        """CTranslate2's ``translate_batch`` with the call's decoding policy; raw results."""
        if not call.sources:
            return []
        key = call.key
        model = self._models[key.model_id]
        longest = max(len(s) + len(p) for s, p in zip(call.sources, call.prefixes, strict=True))
        stop: Callable[[ctranslate2.GenerationStepResult], bool] | None = None
        if key.decoding == "input_length":
            min_length = max_length = longest
            if self.beam_size == 1:  # CTranslate2 takes step callbacks in greedy search only
                stop = _stop_at_own_length(
                    [len(s) + len(p) for s, p in zip(call.sources, call.prefixes, strict=True)]
                )
        else:
            # Never past the model's positions, whatever the input length.
            min_length = 0
            max_length = min(int(longest * self.decoding_ratio) + 16, key.max_output_tokens)
        with self._lock:
            model.calls += 1
            model.used = time.monotonic()
        try:
            translator = self._ensure_loaded(model)
            return list(
                translator.translate_batch(
                    call.sources,
                    target_prefix=call.prefixes if any(call.prefixes) else None,
                    max_batch_size=self.max_batch_tokens,
                    batch_type="tokens",
                    beam_size=self.beam_size,
                    max_input_length=0,  # never truncate; long texts were split when prepared
                    suppress_sequences=[[t] for t in key.suppress_tokens] or None,
                    min_decoding_length=min_length,
                    max_decoding_length=max_length,
                    callback=stop,
                    **options,
                )
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"{key.model_id}: translation failed: {exc}") from exc
        finally:
            with self._lock:
                model.calls -= 1

    def translate_aligned(self, texts: Sequence[str], pair: Pair) -> list[AlignedTranslation]:
        """Like :meth:`translate_batch`, with CTranslate2's ``return_attention`` alignment.

        Used by the fidelity layer to put back placeholders a model dropped;
        texts are cut exactly as :meth:`translate_batch` cuts them. Blocks.
        """
        loaded = self._loaded(pair)
        prepared = self.prepare(texts, [pair] * len(texts))
        results = iter(self._call(self.encode(prepared), return_attention=True))
        return [_aligned(text, results, loaded) for text in prepared]

    def unknown_characters(self, text: str, pair: Pair) -> frozenset[str]:
        """Characters of ``text`` the source tokenizer knows only as bytes or ``<unk>``."""
        known = self._known_chars.setdefault(pair.id, {})
        sp = self._loaded(pair).source_sp
        for ch in set(text) - known.keys():
            ids = sp.encode(ch) if not ch.isspace() else []
            known[ch] = not any(sp.is_byte(i) or sp.is_unknown(i) for i in ids)
        return frozenset(ch for ch in set(text) if not known[ch])

    def _model_of(self, pair: Pair) -> _Model:
        return self._models[self._loaded(pair).model_id]

    def _loaded(self, pair: Pair) -> _Loaded:
        loaded = self._pairs.get(pair.id)
        if loaded is not None:
            return loaded
        for model in self._models.values():
            entry = model.entry.entry(pair)
            if entry is not None:
                loaded = _Loaded(
                    entry,
                    model.entry.model_id,
                    self._tokenizer(entry.source_tokenizer),
                    self._tokenizer(entry.target_tokenizer),
                )
                self._pairs[pair.id] = loaded
                return loaded
        served = ", ".join(sorted(self._models))
        raise EngineError(f"pair {pair.id} is not served here (models: {served})")


def sweep_compute_type(entry: PairEntry, device: str, settings: EngineSettings) -> str:
    """The compute type replicas are timed at: the configured one, else on a GPU what
    compute_type=auto measured fastest there so far (float16 on an H200), else int8."""
    ctype = settings.compute_type or entry.compute_type
    if ctype != "auto":
        return ctype
    return "float16" if device == "cuda" else "int8"


def replica_throughput(
    entry: PairEntry, device: str, ctype: str, seconds: float
) -> Callable[[int, int], float]:
    """Sentences/s of ``entry``'s model loaded with some replicas, every replica calling
    at once with calls of some token budget (:func:`pipeline.engine.replicas.sweep`)."""
    tokenizer = sentencepiece.SentencePieceProcessor(model_file=str(entry.source_tokenizer))
    words = probe_words(tokenizer)

    def throughput(replicas: int, token_budget: int) -> float:
        model = ctranslate2.Translator(
            str(entry.model_dir),
            device=device,
            compute_type=ctype,
            inter_threads=replicas,
            intra_threads=1,
        )
        try:
            probe = ShapeProbe(model, entry, words)
            return concurrent_throughput(probe, replicas, token_budget, seconds=seconds)
        finally:
            del model

    return throughput


def measured_replica_plan(entry: PairEntry, device: str, settings: EngineSettings) -> ReplicaPlan:
    """Replicas and call size for ``entry``'s model on ``device`` (:mod:`pipeline.engine.replicas`):
    cached per model and machine with the engine profiles, else measured now."""
    ctype = sweep_compute_type(entry, device, settings)
    cache = ProfileCache(settings.profile_cache)
    key = "|".join(
        (
            files_fingerprint([entry.model_dir / "model.bin"]),
            f"replicas:{ctype}",
            machine_key(device, 0, 1),
        )
    )
    cached = cache.get_json(key)
    if cached is not None:
        return ReplicaPlan.from_json(cached)
    log.info("measuring replicas and call sizes of %s on %s (%s)", entry.model_dir, device, ctype)
    plan = choose_plan(sweep(replica_throughput(entry, device, ctype, settings.profile_seconds)))
    cache.put_json(key, plan.to_json())
    log.info(
        "%s: %d replica(s), calls of %d tokens (sentences/s measured: %s)",
        entry.model_dir.name,
        plan.replicas,
        plan.token_budget,
        {f"{p.replicas}x{p.token_budget}": p.sentences_per_s for p in plan.points},
    )
    return plan


class EchoTranslator(CTranslate2Translator):
    """Answers each text with its own source tokens and never calls the model
    (``engine.backend = "echo"``): a deterministic engine at near-zero cost, so a run
    measures what the pipeline itself costs (``babelstream bench hotpath``).

    Everything around the model call is the real translator's: tokenising, cutting
    long texts, the batching plan, detokenising.
    """

    def run(self, call: EngineCall) -> list[list[str]]:
        return [list(source) for source in call.sources]


def _stop_at_own_length(
    lengths: Sequence[int],
) -> Callable[[ctranslate2.GenerationStepResult], bool]:
    """A step callback that ends each sequence once it has ``lengths[i]`` tokens.

    Random weights never choose ``</s>``; a real model ends each sequence at
    its own, and CTranslate2 then drops it from the call's batch. Ending each
    at its own source length gives a benchmark model that cost shape rather
    than every sequence decoding as long as the call's longest. (``step``
    counts the target prefix too, as ``lengths`` does.)
    """

    def stop(step: ctranslate2.GenerationStepResult) -> bool:
        return bool(step.step + 1 >= lengths[step.batch_id])

    return stop


def probe_words(sp: sentencepiece.SentencePieceProcessor, count: int = 2048) -> list[str]:
    """Source pieces of generated sentences, enough for any probe call shape."""
    generator = SentenceGenerator(5, min_words=3, max_words=40)
    words: list[str] = []
    while len(words) < count:
        words.extend(sp.encode(generator.sentence(), out_type=str))
    return words


def _aligned(
    text: PreparedText, results: Iterator[ctranslate2.TranslationResult], loaded: _Loaded
) -> AlignedTranslation:
    """One text's translation with its attention matrix, from its pieces' results."""
    entry = loaded.entry
    prefix = list(entry.target_prefix)
    parts: list[str] = []
    src_spans: list[tuple[int, int]] = []
    tgt_spans: list[tuple[int, int]] = []
    blocks: list[AttentionBlock] = []
    offset = n_out = 0
    for piece in text.pieces:
        if not piece.core:
            parts.append(piece.lead)
            offset += len(piece.lead) + len(piece.trail)
            continue
        result = next(results)
        tokens, rows = list(result.hypotheses[0]), list(result.attention[0])
        if prefix and tokens[: len(prefix)] == prefix:
            tokens, rows = tokens[len(prefix) :], rows[len(prefix) :]
        decoded = loaded.target_sp.decode(
            [loaded.target_sp.piece_to_id(token) for token in tokens], out_type="proto"
        )
        # character spans of the source pieces (tokenised again: a rare path)
        proto = loaded.source_sp.encode(piece.core, out_type="proto")
        parts.append(piece.lead)
        target_offset = sum(len(part) for part in parts)
        parts.extend((decoded.text, piece.trail))
        first_src, first_tgt = len(src_spans), len(tgt_spans)
        src_spans.extend(_char_spans(piece.core, proto, offset + len(piece.lead)))
        tgt_spans.extend(_char_spans(decoded.text, decoded, target_offset))
        lo = len(entry.source_prefix)
        if rows:  # one row per target token, one column per source position
            weights = np.asarray(rows, dtype=np.float32)[:, lo : lo + len(proto.pieces)]
            blocks.append(AttentionBlock(first_tgt, first_src, weights))
        n_out += len(tokens)
        offset += len(piece.lead) + len(piece.core) + len(piece.trail)
    return AlignedTranslation(
        "".join(parts) if text.tokens else "",
        text.tokens,
        n_out,
        tuple(src_spans),
        tuple(tgt_spans),
        tuple(blocks),
    )


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
