"""Deployment files (compose, Kubernetes) configure the CLI with its own environment variables."""

from __future__ import annotations

from pydantic import BaseModel

from pipeline.settings import Settings

PREFIX = "BABELSTREAM_"


def assert_setting_key(key: str, where: str) -> None:
    """``key`` (``BABELSTREAM_<SECTION>__<FIELD>``) names a field of :class:`Settings`."""
    section, sep, field = key[len(PREFIX) :].lower().partition("__")
    assert sep, f"{where}: {key} is not BABELSTREAM_<SECTION>__<FIELD>"
    assert section in Settings.model_fields, f"{where}: no settings section {section}"
    model = Settings.model_fields[section].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    assert field in model.model_fields, f"{where}: {key} is not a setting"
