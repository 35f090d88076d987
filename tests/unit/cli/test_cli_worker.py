"""What a worker names its served models by (``babelstream worker``)."""

from __future__ import annotations

from pipeline.cli.commands.worker import served_model_id
from pipeline.engine.registry import Registry
from pipeline.settings import EngineSettings


def test_the_echo_engine_never_shares_the_real_engines_cache_digests() -> None:
    # the echo engine answers each text with itself: under the real engine's name its
    # cache entries would answer real workers' requests untranslated
    model = Registry.load(EngineSettings().registry).models_for()[0]
    real = served_model_id(model, "ctranslate2")
    assert real.startswith(f"{model.model_id}@")
    assert served_model_id(model, "echo") == f"{real}+echo"
