"""Settings from the environment: unknown names refused with the closest one, bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import (
    MAPPING_KEY,
    check_environment,
    setting_variables,
    settings_from_environment,
)


def test_every_field_has_its_variable() -> None:
    names = setting_variables()
    assert names["BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS"] == "kafka.bootstrap_servers"
    assert names["BABELSTREAM_OBSERVABILITY__CONSOLE_EXPORTER"] == "observability.console_exporter"
    assert len(names) > 60


@pytest.mark.parametrize(
    "environ",
    [
        {"BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": "h:1", "BABELSTREAM_CONFIG": "c.toml"},
        {"babelstream_redis__url": "redis://h"},  # pydantic-settings ignores case
        {"BABELSTREAM_SLA__THRESHOLDS_MS__en_de": "2000"},  # a dict setting's key
        {"BABELSTREAM_KAFKA": '{"bootstrap_servers": "h:1"}'},  # a whole section as JSON
        {"PATH": "/bin", "OTHER_BABELSTREAM_X": "1"},
    ],
)
def test_valid_environments_pass(environ: dict[str, str]) -> None:
    check_environment(environ)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("BABELSTREAM_REDIS__URI", "did you mean BABELSTREAM_REDIS__URL?"),
        ("BABELSTREAM_LIMIT__MAX_TEXT_BYTES", "did you mean BABELSTREAM_LIMITS__MAX_TEXT_BYTES?"),
        ("BABELSTREAM_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ", "BABELSTREAM_<SECTION>__<FIELD>"),
    ],
)
def test_unknown_names_are_refused(name: str, hint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_environment({name: "1"})
    message = str(caught.value)
    assert message.startswith(f"unknown setting {name}; ") and hint in message
    assert "\n" not in message


def test_invalid_values_name_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_WORKER__MAX_MESSAGES", "0")
    monkeypatch.setenv("BABELSTREAM_REDIS__TTL_S", "forever")
    with pytest.raises(ConfigError) as caught:
        settings_from_environment()
    message = str(caught.value)
    assert (
        "BABELSTREAM_WORKER__MAX_MESSAGES=0: Input should be greater than or equal to 1" in message
    )
    assert "BABELSTREAM_REDIS__TTL_S=forever" in message
    assert "\n" not in message


def _nested_variables() -> list[tuple[str, str]]:
    """(variable, dotted setting) of every setting inside an object setting."""
    return [(v, s) for v, s in setting_variables().items() if s.count(".") > 1]


def test_object_settings_list_their_fields_as_variables() -> None:
    nested = dict(_nested_variables())
    assert nested["BABELSTREAM_SLA__OBJECTIVES__P95_MS"] == "sla.objectives.p95_ms"
    assert (
        nested[f"BABELSTREAM_SLA__PAIR_OBJECTIVES__{MAPPING_KEY}__TIMEOUT_RATIO"]
        == "sla.pair_objectives.<key>.timeout_ratio"
    )
    assert len(nested) == 15, "3 objects of SLA objectives, 5 fields each"


@pytest.mark.parametrize(("variable", "setting"), _nested_variables())
def test_each_nested_variable_sets_its_field(
    monkeypatch: pytest.MonkeyPatch, variable: str, setting: str
) -> None:
    # a value valid for every objective (latencies, ratios, throughput) and no field's default
    name = variable.replace(MAPPING_KEY, "en_de")
    check_environment({name: "0.5"})
    monkeypatch.setenv(name, "0.5")
    value: object = settings_from_environment()
    for part in setting.replace(MAPPING_KEY.lower(), "en_de").split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    assert value == 0.5


def test_a_nested_variable_keeps_its_objects_other_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_SLA__OBJECTIVES__P95_MS", "800")
    objectives = settings_from_environment().sla.objectives
    assert (objectives.p95_ms, objectives.p99_ms) == (800.0, 2500.0)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("BABELSTREAM_SLA__OBJECTIVES__P9_MS", "did you mean BABELSTREAM_SLA__OBJECTIVES__P99_MS?"),
        (
            "BABELSTREAM_SLA__PAIR_OBJECTIVES__en_de__P9_MS",
            "did you mean BABELSTREAM_SLA__PAIR_OBJECTIVES__en_de__P99_MS?",
        ),
        (
            "BABELSTREAM_SLA__THRESHOLDS_MS__en_de__X",
            "did you mean BABELSTREAM_SLA__THRESHOLDS_MS?",
        ),
    ],
)
def test_unknown_fields_inside_objects_and_mappings_are_refused(name: str, hint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_environment({name: "1"})
    assert str(caught.value) == f"unknown setting {name}; {hint}"


def test_null_unsets_an_optional_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_TENANTS__MAX_ROUND_S", "null")
    monkeypatch.setenv("BABELSTREAM_TENANTS__DEFAULT_QUOTA_CHARS", "500")
    tenants = settings_from_environment().tenants
    assert tenants.max_round_s is None, "the default (0.25) is a bound: null turns it off"
    assert tenants.default_quota_chars == 500


def test_engine_replicas_share_the_cores_unless_threads_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 9)  # 8 cores for the engine, 1 for the loop
    monkeypatch.setenv("BABELSTREAM_ENGINE__INTER_THREADS", "4")
    assert settings_from_environment().engine.threads("cpu") == (4, 2)
    monkeypatch.setenv("BABELSTREAM_ENGINE__INTER_THREADS", "16")
    assert settings_from_environment().engine.threads("cpu") == (16, 1), "one thread each"
    monkeypatch.setenv("BABELSTREAM_ENGINE__INTRA_THREADS", "3")
    assert settings_from_environment().engine.threads("cpu") == (16, 3), "a set value is kept"


def test_unset_replicas_are_two_on_a_cpu_and_one_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    engine = settings_from_environment().engine
    # two calls of one thread each, side by side, on the 2 cores (1.86-2.0x one replica:
    # docs/concepts/batching.md)
    assert engine.threads("cpu") == (2, 1)
    assert engine.threads("cuda")[0] == 1, "a GPU replica is a second copy in its memory"
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert engine.threads("cpu") == (1, 1)


def test_batches_in_flight_are_one_more_than_the_replicas_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every replica computes a batch while one more publishes
    assert settings_from_environment().worker.in_flight(replicas=2) == 3
    assert settings_from_environment().worker.in_flight(replicas=1) == 2
    monkeypatch.setenv("BABELSTREAM_WORKER__BATCHES_IN_FLIGHT", "1")
    assert settings_from_environment().worker.in_flight(replicas=2) == 1, "a set value is kept"


@pytest.mark.parametrize(
    ("value", "position"),
    [
        ("{p95: 3", "line 1, column 2"),
        ('{"p95_ms": 800', "line 1, column 15"),
    ],
)
def test_a_json_setting_that_is_not_json_names_its_variable_and_position(
    monkeypatch: pytest.MonkeyPatch, value: str, position: str
) -> None:
    monkeypatch.setenv("BABELSTREAM_SLA__OBJECTIVES", value)
    with pytest.raises(ConfigError) as caught:
        settings_from_environment()
    message = str(caught.value)
    assert message.startswith("BABELSTREAM_SLA__OBJECTIVES is not valid JSON"), message
    assert position in message and 'a JSON object, e.g. {"p95_ms": 1000.0}' in message, message
    assert "\n" not in message
    assert caught.value.__cause__ is None or not isinstance(caught.value.__cause__, ConfigError)


def test_a_whole_section_as_bad_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_KAFKA", "{bootstrap_servers: h}")
    with pytest.raises(ConfigError, match=r"^BABELSTREAM_KAFKA is not valid JSON \(line 1"):
        settings_from_environment()


def test_scalar_settings_are_not_read_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS", "h1:9092,h2:9092")
    monkeypatch.setenv("BABELSTREAM_SLA__THRESHOLDS_MS__en_de", "2000")
    settings = settings_from_environment()
    assert settings.kafka.bootstrap_servers == "h1:9092,h2:9092"
    assert settings.sla.thresholds_ms["en_de"] == 2000


def _config_file_error(monkeypatch: pytest.MonkeyPatch, config: Path, text: str) -> str:
    """The one-line error of settings read from a config file holding ``text``."""
    config.write_text(text)
    monkeypatch.setenv("BABELSTREAM_CONFIG", str(config))
    with pytest.raises(ConfigError) as caught:
        settings_from_environment()
    return str(caught.value)


def test_a_config_file_that_is_not_toml_names_the_file_and_position(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "babelstream.toml"
    text = "[kafka]\nbootstrap_servers = 'h:1'\n[worker\nmax_messages = 8\n"
    message = _config_file_error(monkeypatch, config, text)
    assert message.startswith(f"BABELSTREAM_CONFIG file {config} is not valid TOML"), message
    assert "line 3, column 8" in message and "\n" not in message


def test_a_missing_config_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    monkeypatch.setenv("BABELSTREAM_CONFIG", str(missing))
    with pytest.raises(ConfigError) as caught:
        settings_from_environment()
    assert str(caught.value) == (
        f"BABELSTREAM_CONFIG names {missing}, which does not exist: "
        "fix the path or unset BABELSTREAM_CONFIG"
    )
    monkeypatch.setenv("BABELSTREAM_CONFIG", str(tmp_path))
    with pytest.raises(ConfigError, match="is a directory, not a TOML file"):
        settings_from_environment()


def test_a_misspelled_section_of_the_config_file_is_refused_with_the_closest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "babelstream.toml"
    message = _config_file_error(monkeypatch, config, "[kafak]\nbootstrap_servers = 'h:1'\n")
    assert message == (
        f"BABELSTREAM_CONFIG file {config}: [kafak] is no settings section (did you mean [kafka]?)"
    )


def test_an_unknown_key_of_a_nested_table_is_named_by_the_tables_dotted_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "babelstream.toml"
    message = _config_file_error(monkeypatch, config, "[sla.objectives]\np95 = 800\n")
    assert f"{config}: [sla.objectives] p95=800: no such setting" in message, message


def test_a_bad_value_in_the_config_file_names_the_file_and_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "babelstream.toml"
    message = _config_file_error(monkeypatch, config, "[worker]\nmax_messages = 0\n")
    assert f"{config}: [worker] max_messages=0: Input should be greater than" in message, message
    monkeypatch.setenv("BABELSTREAM_WORKER__MAX_MESSAGES", "-1")  # the environment wins
    with pytest.raises(ConfigError, match=r"BABELSTREAM_WORKER__MAX_MESSAGES=-1: Input"):
        settings_from_environment()
