"""Held-out quality of the demo model, measured through the serving path.

500 generated sentences of 3-40 words, about half of whose words never
occurred in training (see :mod:`pipeline.sample_sentences`), are
translated by :class:`~pipeline.engine.translator.CTranslate2Translator` in
both directions with beam 1 and beam 4, and scored with sacrebleu's chrF
against the character map's output. The map makes the references; the model
makes the translations.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.contract.pairs import Pair
from pipeline.demo_model import (
    DEMO_MODEL_ID,
    DEMO_PAIRS,
    LANG_TOKENS,
    MAX_INPUT_TOKENS,
    MAX_OUTPUT_TOKENS,
    SPM_FILE,
)
from pipeline.engine.registry import PairEntry
from pipeline.engine.translator import CTranslate2Translator
from pipeline.errors import missing_extra
from pipeline.pseudo_locale import from_pseudo, to_pseudo
from pipeline.sample_sentences import heldout_sentences, heldout_with_placeholders

CHRF_BAR = 95.0
HELDOUT_SIZE = 500
METRICS_FILE = "metrics.json"


@dataclass(frozen=True, slots=True)
class Score:
    """chrF of one pair at one beam size."""

    pair: str
    beam_size: int
    chrf: float
    exact_match: float
    sentences_per_s: float


@dataclass(frozen=True)
class DemoMetrics:
    """All scores, and whether every one clears :data:`CHRF_BAR`."""

    model_id: str
    compute_type: str
    sentences: int
    chrf_bar: float
    scores: tuple[Score, ...]
    # share of held-out sentences with placeholder tokens whose tokens all came back, per pair
    placeholders_kept: dict[str, float] | None = None

    @property
    def passed(self) -> bool:
        """True when every pair and beam size reaches the bar."""
        return all(s.chrf >= self.chrf_bar for s in self.scores)

    def to_json(self) -> str:
        """Pretty JSON, as written to ``models/demo/metrics.json``."""
        data = asdict(self)
        data["passed"] = self.passed
        return json.dumps(data, indent=2, ensure_ascii=False)


def demo_entries(model_dir: Path) -> list[PairEntry]:
    """Registry entries for the two demo pairs served from ``model_dir``."""
    model_dir = Path(model_dir).resolve()
    return [
        PairEntry(
            pair=Pair.parse(pair_id),
            model_dir=model_dir,
            source_tokenizer=model_dir / SPM_FILE,
            target_tokenizer=model_dir / SPM_FILE,
            model_id=DEMO_MODEL_ID,
            target_prefix=(LANG_TOKENS[Pair.parse(pair_id).target],),
            source_suffix=("</s>",),
            suppress_tokens=tuple(LANG_TOKENS.values()),
            max_input_tokens=MAX_INPUT_TOKENS,
            max_output_tokens=MAX_OUTPUT_TOKENS,
        )
        for pair_id in DEMO_PAIRS
    ]


def evaluate_demo(
    model_dir: Path, *, threads: int = 2, compute_type: str = "int8", size: int = HELDOUT_SIZE
) -> DemoMetrics:
    """Score the demo model in ``model_dir`` on the held-out set, both pairs, beams 1 and 4."""
    try:
        from sacrebleu.metrics.chrf import CHRF
    except ImportError:
        raise missing_extra("sacrebleu", "dev") from None
    english = heldout_sentences(size)
    pseudo = [to_pseudo(s) for s in english]
    # The map makes each direction's reference: en-XA -> en maps en-XA letters
    # back, so an English "é" (which en -> en-XA keeps) comes back as "e".
    data = {"en_en-XA": (english, pseudo), "en-XA_en": (pseudo, [from_pseudo(s) for s in pseudo])}
    scores: list[Score] = []
    for beam in (1, 4):
        translator = CTranslate2Translator(
            demo_entries(model_dir),
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            beam_size=beam,
        )
        for pair_id, (sources, references) in data.items():
            start = time.perf_counter()
            hyps = [t.text for t in translator.translate_batch(sources, Pair.parse(pair_id))]
            elapsed = time.perf_counter() - start
            chrf = CHRF().corpus_score(hyps, [references]).score
            exact = sum(h == r for h, r in zip(hyps, references, strict=True)) / len(hyps)
            scores.append(
                Score(pair_id, beam, round(chrf, 2), round(exact, 4), round(len(hyps) / elapsed, 1))
            )
    return DemoMetrics(
        DEMO_MODEL_ID, compute_type, size, CHRF_BAR, tuple(scores), placeholders_kept(translator)
    )


def placeholders_kept(translator: CTranslate2Translator) -> dict[str, float]:
    """Share of held-out sentences with ``⟦n⟧`` tokens that keep every token, per pair."""
    from collections import Counter

    from pipeline.fidelity.tokens import TOKEN_RE

    english = heldout_with_placeholders()
    sources = {"en_en-XA": english, "en-XA_en": [to_pseudo(s) for s in english]}
    kept: dict[str, float] = {}
    for pair_id, texts in sources.items():
        outputs = translator.translate_batch(texts, Pair.parse(pair_id))
        same = sum(
            Counter(TOKEN_RE.findall(src)) == Counter(TOKEN_RE.findall(out.text))
            for src, out in zip(texts, outputs, strict=True)
        )
        kept[pair_id] = round(same / len(texts), 4)
    return kept


def write_metrics(metrics: DemoMetrics, model_dir: Path) -> Path:
    """Write ``metrics.json`` next to the model."""
    path = Path(model_dir) / METRICS_FILE
    path.write_text(metrics.to_json() + "\n", encoding="utf-8")
    return path
