"""One typed settings object for the whole pipeline.

Read once at the edge (CLI, worker start-up) from the environment
(``BABELSTREAM_<SECTION>__<FIELD>``) and an optional TOML file
(``BABELSTREAM_CONFIG``), then passed down explicitly. Nothing below the
edge reads the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    ingress_partitions: int = Field(6, ge=1)
    pair_partitions: int = Field(4, ge=1)
    request_timeout_ms: int = Field(30_000, ge=1000)
    client_id: str = "babelstream"


class RedisSettings(_Section):
    url: str = "redis://127.0.0.1:6379/0"
    password: SecretStr | None = None
    key_prefix: str = "bs"
    cache_version: int = 1
    ttl_s: int = Field(7 * 24 * 3600, ge=1)
    socket_timeout_s: float = Field(0.5, gt=0)


class StackSettings(_Section):
    """Where the local dev stack keeps jars, data and logs."""

    home: Path = PROJECT_ROOT / "var"
    kafka_version: str = "3.9.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    redis_port: int = 6379


class LimitSettings(_Section):
    max_text_bytes: int = Field(16 * 1024, ge=1)
    min_timeout_ms: int = Field(100, ge=1)
    max_timeout_ms: int = Field(3_600_000, ge=1)
    default_timeout_ms: int = Field(30_000, ge=1)
    max_metadata_bytes: int = Field(4 * 1024, ge=0)


class EngineSettings(_Section):
    registry: Path = PROJECT_ROOT / "models" / "registry.toml"
    device: str = "auto"
    inter_threads: int = Field(1, ge=1)
    intra_threads: int = Field(0, ge=0)
    beam_size: int = Field(1, ge=1)


class WorkerSettings(_Section):
    pairs: tuple[str, ...] = ()
    max_messages: int = Field(64, ge=1)
    max_wait_s: float = Field(0.02, gt=0)
    token_budget: int = Field(4096, ge=1)
    l1_cache_size: int = Field(50_000, ge=0)
    dedup_window_s: float = Field(300.0, gt=0)
    concurrency: int = Field(1, ge=1)
    bulk_share: float = Field(0.2, ge=0, le=1)
    web_port: int = 6066
    data_dir: Path = PROJECT_ROOT / "var" / "faust"


class Settings(BaseSettings):
    """Root settings; sections are frozen, so pass them around freely."""

    model_config = SettingsConfigDict(
        env_prefix="BABELSTREAM_",
        env_nested_delimiter="__",
        frozen=True,
        extra="ignore",
    )

    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    stack: StackSettings = StackSettings()
    limits: LimitSettings = LimitSettings()
    engine: EngineSettings = EngineSettings()
    worker: WorkerSettings = WorkerSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get("BABELSTREAM_CONFIG")
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)


def load_settings(**overrides: Any) -> Settings:
    """Build settings from env / config file, with explicit overrides on top."""
    return Settings(**overrides)
