"""Security options of every client type, from one settings object (no services)."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import faust
import pytest
from pydantic import SecretStr, ValidationError

from pipeline.kafka.clients import (
    aiokafka_options,
    faust_app_options,
    kafka_python_options,
    spark_kafka_options,
    spark_kafka_source_options,
)
from pipeline.settings import KafkaSettings, RedisSettings
from pipeline.stack.tls import ensure_tls
from pipeline.storage.redis_client import redis_options

PASSWORD = 'p"a\\ss-Ω'


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tls(tmp_path_factory.mktemp("tls")).ca


def _sasl_ssl(ca: Path) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers="h1:9093,h2:9093",
        security_protocol="SASL_SSL",
        sasl_username="app",
        sasl_password=SecretStr(PASSWORD),
        ssl_cafile=ca,
    )


def test_plaintext_options_carry_no_security() -> None:
    options = kafka_python_options(KafkaSettings(), "client")
    assert options["security_protocol"] == "PLAINTEXT"
    assert not {"ssl_context", "sasl_plain_password"} & set(options)
    assert spark_kafka_options(KafkaSettings()) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.request.timeout.ms": "30000",
    }
    assert set(faust_app_options(KafkaSettings())) == {"broker"}


def test_spark_sources_get_the_security_options_and_a_short_fetch_wait(ca: Path) -> None:
    settings = _sasl_ssl(ca).model_copy(update={"spark_fetch_max_wait_ms": 25})
    options = spark_kafka_source_options(settings)
    # the sinks' options unchanged (a producer warns of a consumer setting), plus the wait
    assert options == spark_kafka_options(settings) | {"kafka.fetch.max.wait.ms": "25"}


@pytest.mark.parametrize("options", [kafka_python_options, aiokafka_options])
def test_python_clients_get_scram_over_tls(ca: Path, options: object) -> None:
    got = options(_sasl_ssl(ca), "bulk")  # type: ignore[operator]
    assert got["bootstrap_servers"] == ["h1:9093", "h2:9093"]
    assert got["security_protocol"] == "SASL_SSL"
    assert got["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (got["sasl_plain_username"], got["sasl_plain_password"]) == ("app", PASSWORD)
    # kafka-python logs its configuration dict at DEBUG: the password must not show
    assert PASSWORD not in repr(got) and PASSWORD not in f"{got}"
    context = got["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs()  # our CA loaded


def test_faust_gets_sasl_credentials_with_the_tls_context(ca: Path) -> None:
    options = faust_app_options(_sasl_ssl(ca))
    assert options["broker"] == ["kafka://h1:9093", "kafka://h2:9093"]
    credentials = options["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert (credentials.username, credentials.password) == ("app", PASSWORD)
    assert isinstance(credentials.ssl_context, ssl.SSLContext)
    assert PASSWORD not in repr(credentials)


def test_faust_gets_ssl_credentials_for_mutual_tls(tmp_path: Path) -> None:
    tls = ensure_tls(tmp_path)
    kafka = KafkaSettings(
        security_protocol="SSL", ssl_cafile=tls.ca, ssl_certfile=tls.client_keystore
    )
    credentials = faust_app_options(kafka)["broker_credentials"]
    assert isinstance(credentials, faust.SSLCredentials)
    assert credentials.protocol.value == "SSL"


def test_spark_options_use_pem_stores_and_a_quoted_jaas_line(
    ca: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    py4j = logging.getLogger("py4j")
    monkeypatch.setattr(py4j, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "level", logging.DEBUG)
    options = spark_kafka_options(_sasl_ssl(ca))
    # py4j logs every JVM call's arguments at DEBUG: the JAAS line must not reach it
    assert py4j.getEffectiveLevel() == logging.INFO
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == str(ca)
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="p\\"a\\\\ss-Ω";'
    )


def test_spark_mutual_tls_needs_key_and_certificate_in_one_file(tmp_path: Path) -> None:
    tls = ensure_tls(tmp_path)
    one_file = KafkaSettings(
        security_protocol="SSL", ssl_cafile=tls.ca, ssl_certfile=tls.client_keystore
    )
    options = spark_kafka_options(one_file)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.location"] == str(tls.client_keystore)
    two_files = one_file.model_copy(
        update={"ssl_certfile": tls.server_cert, "ssl_keyfile": tls.server_key}
    )
    with pytest.raises(ValueError, match="in one PEM file"):
        spark_kafka_options(two_files)


def test_sasl_needs_credentials() -> None:
    with pytest.raises(ValidationError, match="needs sasl_username and sasl_password"):
        KafkaSettings(security_protocol="SASL_SSL", sasl_username="app")


def test_redis_tls_and_acl_user_from_settings(ca: Path) -> None:
    settings = RedisSettings(
        url="rediss://cache:6380/0", username="app", password=SecretStr("pw"), ssl_ca_certs=ca
    )
    options = redis_options(settings)
    assert (options["username"], options["password"]) == ("app", "pw")
    assert options["ssl_ca_certs"] == str(ca) and options["ssl_check_hostname"] is True
    plain = redis_options(RedisSettings(password=SecretStr("pw")))
    assert not any(key.startswith("ssl_") for key in plain)


def test_redis_tls_files_need_a_rediss_url(ca: Path) -> None:
    with pytest.raises(ValidationError, match="not rediss://"):
        RedisSettings(url="redis://cache:6379/0", ssl_ca_certs=ca)
