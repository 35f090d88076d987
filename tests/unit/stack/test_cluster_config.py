"""Cluster and secure layouts of the local stack: node ports, configs, replication (no services)."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from pydantic import SecretStr, ValidationError

from pipeline.errors import StackError
from pipeline.settings import KafkaSettings, Settings, StackSettings
from pipeline.stack import layout
from pipeline.stack.kafka import render_server_properties
from pipeline.stack.redis_server import render_redis_conf
from pipeline.stack.secure import ensure_secure_material, load_secrets, service_secrets
from pipeline.stack.tls import ensure_tls


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def _cluster(tmp_path: Path, **stack: object) -> Settings:
    return layout.with_layout(
        Settings(
            stack=StackSettings(
                home=tmp_path,
                kafka_port=20092,
                kafka_controller_port=20093,
                kafka_ssl_port=20094,
                redis_port=20379,
                **stack,
            )
        ),
        brokers=3,
    )


def test_node_ports_step_from_the_base_ports(tmp_path: Path) -> None:
    nodes = layout.node_ports(_cluster(tmp_path).stack)
    assert [(n.node_id, n.client, n.controller, n.ssl) for n in nodes] == [
        (1, 20092, 20093, 20094),
        (2, 20102, 20103, 20104),
        (3, 20112, 20113, 20114),
    ]


def test_colliding_ports_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"^stack ports collide \(20093, 20094\)"):
        _cluster(tmp_path, node_port_step=1)


def test_cluster_defaults_to_replication_3_min_isr_2(tmp_path: Path) -> None:
    settings = _cluster(tmp_path)
    assert settings.stack.brokers == 3
    assert (settings.kafka.replication_factor, settings.kafka.min_insync_replicas) == (3, 2)


def test_every_node_replicates_internal_topics_and_knows_the_quorum(tmp_path: Path) -> None:
    settings = _cluster(tmp_path)
    nodes = layout.node_ports(settings.stack)
    rendered = [
        _props(render_server_properties(settings, node, tmp_path / f"d{node.node_id}"))
        for node in nodes
    ]
    voters = "1@127.0.0.1:20093,2@127.0.0.1:20103,3@127.0.0.1:20113"
    for node, props in zip(nodes, rendered, strict=True):
        assert props["node.id"] == str(node.node_id)
        assert props["controller.quorum.voters"] == voters
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{node.client},CONTROLLER://127.0.0.1:{node.controller}"
        )
        assert props["log.dirs"] == str(tmp_path / f"d{node.node_id}")
        for key in (
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "default.replication.factor",
        ):
            assert props[key] == "3", key
        assert props["transaction.state.log.min.isr"] == props["min.insync.replicas"] == "2"


def test_explicit_replication_is_kept_but_must_fit(tmp_path: Path) -> None:
    base = StackSettings(
        home=tmp_path,
        kafka_port=20092,
        kafka_controller_port=20093,
        kafka_ssl_port=20094,
        redis_port=20379,
    )
    kept = layout.with_layout(
        Settings(stack=base, kafka=KafkaSettings(replication_factor=2, min_insync_replicas=2)),
        brokers=3,
    )
    assert (kept.kafka.replication_factor, kept.kafka.min_insync_replicas) == (2, 2)
    with pytest.raises(StackError, match="replication_factor 1 loses partitions"):
        layout.with_layout(
            Settings(stack=base, kafka=KafkaSettings(replication_factor=1)), brokers=3
        )
    with pytest.raises(StackError, match="replication_factor is 3 but the stack has 1"):
        layout.with_layout(
            Settings(stack=base, kafka=KafkaSettings(replication_factor=3, min_insync_replicas=2)),
            brokers=1,
        )


def test_min_isr_above_replication_is_rejected() -> None:
    with pytest.raises(ValidationError, match="no write could succeed"):
        KafkaSettings(replication_factor=1, min_insync_replicas=2)


def test_layout_is_recorded_and_reused_without_flags(tmp_path: Path) -> None:
    settings = _cluster(tmp_path)
    layout.record_layout(settings)
    plain = Settings(
        stack=StackSettings(
            home=tmp_path,
            kafka_port=20092,
            kafka_controller_port=20093,
            kafka_ssl_port=20094,
            redis_port=20379,
        )
    )
    again = layout.with_layout(plain)
    assert again.stack.brokers == 3 and again.kafka.replication_factor == 3
    layout.forget_layout(tmp_path)
    assert layout.with_layout(plain).stack.brokers == 1


def test_secure_node_has_no_plaintext_listener(tmp_path: Path) -> None:
    settings = layout.with_layout(_cluster(tmp_path), secure=True)
    secrets_, tls = ensure_secure_material(tmp_path)
    secure = service_secrets(tmp_path, "kafka")
    node = layout.node_ports(settings.stack)[1]
    text = render_server_properties(settings, node, tmp_path / "d", secure)
    props = _props(text)
    assert "PLAINTEXT" not in props["listeners"] + props["listener.security.protocol.map"]
    assert props["listeners"] == (
        "SASL_SSL://127.0.0.1:20102,SSL://127.0.0.1:20104,CONTROLLER://127.0.0.1:20103"
    )
    assert props["inter.broker.listener.name"] == "SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.ssl.ssl.client.auth"] == "required"
    assert props["ssl.truststore.location"] == str(tls.ca)
    assert secrets_.kafka_password.get_secret_value() not in text


def test_secure_nodes_authorize_and_their_certificates_map_to_super_users(tmp_path: Path) -> None:
    settings = layout.with_layout(_cluster(tmp_path), secure=True)
    _, tls = ensure_secure_material(tmp_path)
    secure = service_secrets(tmp_path, "kafka")
    node = layout.node_ports(settings.stack)[1]
    props = _props(render_server_properties(settings, node, tmp_path / "d", secure))
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    supers = {user.removeprefix("User:") for user in props["super.users"].split(";")}
    assert secure.username in supers
    # Kafka maps a certificate's subject (RFC 2253, as below) by the first rule that matches
    rule = re.fullmatch(r"RULE:\^(.*)\$/\$1/,DEFAULT", props["ssl.principal.mapping.rules"])
    assert rule is not None
    for pem in (tls.server_cert, tls.client_keystore):
        subject = x509.load_pem_x509_certificate(pem.read_bytes()).subject.rfc4514_string()
        mapped = re.fullmatch(rule.group(1), subject)
        assert mapped is not None and mapped.group(1) in supers, subject


def test_secure_redis_is_tls_only_with_a_hashed_acl_password(tmp_path: Path) -> None:
    secrets_, _ = ensure_secure_material(tmp_path)
    secure = service_secrets(tmp_path, "redis")
    conf = render_redis_conf(20379, tmp_path / "data", tmp_path / "redis.conf", secure)
    lines = conf.splitlines()
    assert "port 0" in lines and "tls-port 20379" in lines
    assert "user default off" in lines
    (user,) = [line for line in lines if line.startswith(f"user {secrets_.redis_username} ")]
    assert " #" in user  # SHA-256 of the password, never the password
    assert secrets_.redis_password.get_secret_value() not in conf


def test_certificates_chain_to_the_ca_and_keys_are_private(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    server = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    for key_file in (files.server_key, files.server_keystore, files.client_keystore):
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600, key_file
    before = files.ca.read_bytes()
    assert ensure_tls(tmp_path / "tls").ca.read_bytes() == before  # generated once


def test_client_settings_files_load_back_as_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = layout.with_layout(_cluster(tmp_path), secure=True)
    ensure_secure_material(tmp_path)
    toml_path, env_path = layout.write_client_settings(settings)
    for path in (toml_path, env_path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for key in list(os.environ):
        if key.startswith("BABELSTREAM_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("BABELSTREAM_CONFIG", str(toml_path))
    loaded = Settings()
    expected = layout.client_settings(settings)
    assert loaded.kafka == expected.kafka and loaded.redis == expected.redis
    assert loaded.kafka.bootstrap_servers == "127.0.0.1:20092,127.0.0.1:20102,127.0.0.1:20112"
    assert loaded.kafka.security_protocol == "SASL_SSL"
    assert loaded.kafka.sasl_password == load_secrets(tmp_path).kafka_password
    assert loaded.redis.url == "rediss://127.0.0.1:20379/0"
    env_text = env_path.read_text()
    assert "export BABELSTREAM_KAFKA__SASL_PASSWORD=" in env_text
    assert tomllib.loads(toml_path.read_text())["kafka"]["replication_factor"] == 3


def test_secrets_stay_hidden_in_reprs(tmp_path: Path) -> None:
    ensure_secure_material(tmp_path)
    stack_secrets = load_secrets(tmp_path)
    settings = layout.client_settings(layout.with_layout(_cluster(tmp_path), secure=True))
    shown = repr(settings) + str(settings.model_dump()) + settings.model_dump_json()
    shown += repr(stack_secrets)
    for secret in (stack_secrets.kafka_password, stack_secrets.redis_password):
        assert isinstance(secret, SecretStr)
        assert secret.get_secret_value() not in shown


def test_down_finds_every_node_of_the_recorded_layout_without_secrets(tmp_path: Path) -> None:
    from pipeline.stack import manager

    layout.record_layout(layout.with_layout(_cluster(tmp_path), secure=True))
    lines: list[str] = []
    manager.down(Settings(stack=StackSettings(home=tmp_path)), lines.append)
    assert lines == [
        "redis: not running",
        "kafka-1: not running",
        "kafka-2: not running",
        "kafka-3: not running",
    ]
    assert layout.recorded_layout(Settings(stack=StackSettings(home=tmp_path))) is None
