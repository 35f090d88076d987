"""Models added from a local server (an Argos index and package, OPUS-MT releases) and
served by a worker through Kafka, each text as its source model translates it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ctranslate2
import pytest
import sentencepiece

from pipeline.bench.pairs import registry_worker, spread_requests
from pipeline.client import TranslationClient
from pipeline.contract.pairs import Pair
from pipeline.engine.registry import Registry
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from tests.model_archives import ARGOS_METADATA, argos_package, opus_release, serving

pytestmark = pytest.mark.integration

TEXTS = ["Hello, world.", "The pipeline reads its requests from Kafka.", "Good morning!"]


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


def models_add(registry: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``babelstream models add`` as a user runs it (its own process, its own downloads)."""
    env = {
        **os.environ,
        "BABELSTREAM_MODELS__DOWNLOAD_DIR": str(registry.parent / "downloads"),
    }
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "models", "add", *args, "--registry", str(registry)],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=300,
    )


def as_argos_translates(model_dir: Path, text: str, prefix: str) -> str:
    """What Argos Translate gives for ``text`` with the package's own files (greedy)."""
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "sentencepiece.model"))
    tokens = sp.encode(text, out_type=str)
    result = ctranslate2.Translator(str(model_dir), device="cpu").translate_batch(
        [tokens], target_prefix=[[prefix]], beam_size=1, max_decoding_length=2 * len(tokens) + 17
    )[0]
    return str(sp.decode(result.hypotheses[0][1:]))


def test_argos_and_opus_models_added_from_a_server_are_served_through_kafka(
    settings: Settings, tmp_path: Path
) -> None:
    package = argos_package(tmp_path / "translate-en_en-XA-1_0.argosmodel")
    bilingual = opus_release(tmp_path / "opus-2020-02-26.zip", ("en",), ("de",))
    several = opus_release(tmp_path / "opus-2021-03-04.zip", ("en",), ("fr", "es"))
    registry = tmp_path / "models" / "registry.toml"
    with serving(
        {
            "/argos/translate-en_en-XA-1_0.argosmodel": package.read_bytes(),
            "/opus/en-de/opus-2020-02-26.zip": bilingual.read_bytes(),
            "/opus/en-fr+es/opus-2021-03-04.zip": several.read_bytes(),
        }
    ) as server:
        entry = {**ARGOS_METADATA, "links": [server.url("argos/translate-en_en-XA-1_0.argosmodel")]}
        server.files["/argos/index.json"] = json.dumps([entry]).encode()
        for args in (
            (server.url("argos/index.json"), "--pair", "en_en-XA"),
            (server.url("opus/en-de/opus-2020-02-26.zip"),),
            (server.url("opus/en-fr+es/opus-2021-03-04.zip"),),
        ):
            added = models_add(registry, *args)
            assert added.returncode == 0, added.stderr
    loaded = Registry.load(registry)
    assert set(loaded.models) == {"argos-en-en-XA", "opus-mt-en-de", "opus-mt-en-mul2"}
    pairs = [Pair("en", "en-XA"), Pair("en", "de"), Pair("en", "fr"), Pair("en", "es")]
    assert all(loaded.model_for(p) is not None for p in pairs)

    texts = [t for t in TEXTS for _ in pairs]
    requests = spread_requests(texts, pairs)
    with (
        registry_worker(settings, registry, pairs[0], "test-model-import-worker.log", {}) as (
            _worker,
            _ready_s,
        ),
        TranslationClient(settings.kafka, settings.limits) as client,
    ):
        replies = client.translate(requests, timeout_s=180)
    assert replies.all_ok, [(r.pair, r.status, r.error) for r in replies.results.values()]

    argos_dir = loaded.models["argos-en-en-XA"].model_dir
    for request, result in zip(requests, replies.ordered, strict=True):
        assert result is not None
        pair = Pair(request.source_lang, request.target_lang)
        model = loaded.model_for(pair)
        assert model is not None and (result.model or "").startswith(f"{model.model_id}@")
        assert result.translation and result.output_tokens
        if pair == pairs[0]:
            # a trained model: the worker's text is the package's own translation (the
            # OPUS-MT models here have random weights, whose ties break by batch shape)
            expected = as_argos_translates(argos_dir, request.text, ">>en-XA<<")
            assert result.translation == expected, request.text
