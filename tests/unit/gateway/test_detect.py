"""Language detection (pipeline/detect.py) on short texts, restricted to a set of tags."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.detect import (
    UNKNOWN,
    Detection,
    LanguageDetector,
    accuracy,
    detector_for,
    language_name,
)
from pipeline.pseudo_locale import to_pseudo
from pipeline.settings import DetectionSettings

SAMPLES_FILE = Path(__file__).parents[2] / "data" / "detect_short_texts.tsv"


def _samples() -> list[tuple[str, str]]:
    rows = []
    for line in SAMPLES_FILE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            tag, text = line.split("\t")
            rows.append((tag, text))
    english = [text for tag, text in rows if tag == "en"]
    return rows + [("en-XA", to_pseudo(text)) for text in english]


SAMPLES = _samples()


@pytest.fixture(scope="module")
def detector() -> LanguageDetector:
    return LanguageDetector({tag for tag, _ in SAMPLES})


def test_the_sample_set_is_short_texts() -> None:
    assert len(SAMPLES) >= 200
    assert all(len(text) <= 40 for _, text in SAMPLES)


def test_short_texts_are_detected_accurately(detector: LanguageDetector) -> None:
    # measured 0.986 over 14 tags (13 languages and en-XA); each language at least 0.93
    overall, per_language = accuracy(detector, SAMPLES)
    assert overall >= 0.95, per_language
    assert min(per_language.values()) >= 0.85, per_language
    assert per_language["en-XA"] == 1.0


def test_each_text_of_a_list_is_detected_on_its_own(detector: LanguageDetector) -> None:
    texts = [
        "Where is the train station?",
        "Wo ist der Bahnhof?",
        "Où est la gare, s'il te plaît ?",
    ]
    assert [d.language for d in detector.detect_each(texts)] == ["en", "de", "fr"]


def test_candidates_narrow_per_call(detector: LanguageDetector) -> None:
    # German text, but only English and French may answer
    found = detector.detect("Danke für die schnelle Antwort!", among=["en", "fr"])
    assert found.language in ("en", "fr")
    ranked = detector.ranked("Danke für die schnelle Antwort!", among=["en", "fr"])
    assert {d.language for d in ranked} <= {"en", "fr"}
    assert sum(d.confidence for d in ranked) == pytest.approx(1.0, abs=1e-3)


def test_only_the_given_languages_are_answered() -> None:
    only = LanguageDetector(["de", "fr"])
    assert only.detect("Where is the train station?").language in ("de", "fr")
    assert only.languages == ("de", "fr")


def test_the_demo_pair_tells_english_from_its_pseudo_locale() -> None:
    demo = LanguageDetector(["en", "en-XA"])
    assert demo.detect("Hello world, 42 times!") == Detection("en", 1.0)
    assert demo.detect(to_pseudo("Hello world, 42 times!")) == Detection("en-XA", 1.0)
    # a few accented letters are English (or French), not the pseudo-locale
    assert demo.detect("Café crème at the Hôtel de Ville").language == "en"


def test_a_pseudo_locale_without_an_alphabet_is_never_detected() -> None:
    bench = LanguageDetector(["en", "en-XB"])
    assert bench.detectable == ("en",)
    assert bench.detect("Hello there").language == "en"


def test_a_text_without_letters_has_no_language(detector: LanguageDetector) -> None:
    for text in ("", "42", "🙂🙂", "   ", "3.14 + 2"):
        assert detector.detect(text) == UNKNOWN
        assert detector.ranked(text) == []


def test_a_bare_tag_wins_over_a_regional_one() -> None:
    both = LanguageDetector(["pt-BR", "pt", "en"]).detect("Obrigado pela resposta rápida!")
    assert both.language == "pt"
    regional = LanguageDetector(["pt-BR", "en"]).detect("Obrigado pela resposta rápida!")
    assert regional.language == "pt-BR"


def test_language_names() -> None:
    assert language_name("pt-BR") == "Portuguese"
    assert language_name("en-XA") == "English"
    assert language_name("xx") is None


@pytest.fixture(scope="module")
def demo_beside_reference() -> LanguageDetector:
    return detector_for(["en", "en-XA"], DetectionSettings())


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Привет, как дела?", "ru"),
        ("你好，世界", "zh"),
        ("مرحبا بالعالم", "ar"),
        ("Bonjour tout le monde, comment allez-vous ?", "fr"),
        ("Guten Tag, wie geht es Ihnen?", "de"),
    ],
)
def test_a_text_in_a_language_no_model_serves_is_reported_in_it(
    demo_beside_reference: LanguageDetector, text: str, language: str
) -> None:
    # restricted to the served languages these were all English, confidence 1
    found = demo_beside_reference.detect(text)
    assert (found.language, found.supported) == (language, False)
    assert found.confidence >= 0.5
    assert demo_beside_reference.ranked(text)[0] == found


def test_short_english_stays_english_beside_the_reference_languages(
    demo_beside_reference: LanguageDetector,
) -> None:
    english = [text for tag, text in SAMPLES if tag == "en"]
    found = demo_beside_reference.detect_each([*english, "Hello world, 42 times!"])
    assert {(d.language, d.supported) for d in found} == {("en", True)}
    # a confidence against the likeliest other language, not 1 for the only candidate
    assert min(d.confidence for d in found) < 1.0


def test_short_texts_are_detected_accurately_beside_the_reference_languages() -> None:
    detector = detector_for({tag for tag, _ in SAMPLES}, DetectionSettings())
    overall, per_language = accuracy(detector, SAMPLES)
    assert overall >= 0.95, per_language
    assert min(per_language.values()) >= 0.85, per_language


def test_below_the_threshold_the_likeliest_served_language_is_the_answer() -> None:
    sure = detector_for(["en", "en-XA"], DetectionSettings(unsupported_confidence=1.0))
    found = sure.detect("Bonjour tout le monde, comment allez-vous ?")
    assert (found.language, found.supported) == ("en", True)
    assert found.confidence < 0.5


def test_reference_languages_are_iso_codes_lingua_knows() -> None:
    with pytest.raises(ValueError, match="not ISO 639-1 codes lingua knows: xx"):
        DetectionSettings(reference_languages=["fr", "xx"])
