"""deploy/k8s: every manifest parses, and the pieces refer to each other and to Settings correctly.

The same checks run on the raw files (base, and base + overlay resources) and,
when kubectl is installed, on what ``kubectl kustomize`` renders (patches applied).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.contract.pairs import work_topic
from pipeline.engine.registry import registry_models
from pipeline.kafka.roles import ROLES, Grant, Role, role_grants, role_user
from pipeline.kafka.topics import topic_specs
from pipeline.settings import PROJECT_ROOT, Settings
from tests.docs_pages import code_blocks
from tests.unit.settings_keys import PREFIX, assert_setting_key

K8S = PROJECT_ROOT / "deploy" / "k8s"
BASE, CLUSTER = K8S / "base", K8S / "overlays" / "cluster"
WORKLOADS = ("StatefulSet", "Deployment")
# created by the operator (overlays/cluster/kustomization.yaml says how)
EXTERNAL_SECRETS = {"babelstream-redis"}
APP_ID = "babelstream"  # the Faust app id = the workers' consumer group
# the role whose Kafka user each component runs as in the cluster overlay
COMPONENT_ROLES: dict[str, Role] = {
    "router": "router",
    "worker": "worker",
    "sla": "sla",
    "dashboard": "sla",  # reads what the SLA job writes
    "gateway": "gateway",
}
STRIMZI_RESOURCES = {
    "topic": "topic",
    "group": "group",
    "cluster": "cluster",
    "transactional-id": "transactionalId",
}

Doc = dict[str, Any]


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomize_files(folder: Path) -> Iterator[Path]:
    """The resource files a kustomization lists, following directories."""
    kustomization = load(folder / "kustomization.yaml")[0]
    for entry in kustomization.get("resources", []):
        target = (folder / entry).resolve()
        if target.is_dir():
            yield from kustomize_files(target)
        else:
            yield target


def generated(folder: Path) -> list[Doc]:
    """Secrets a kustomization's secretGenerator makes (names unhashed: the overlay says so)."""
    spec = load(folder / "kustomization.yaml")[0]
    assert not spec.get("secretGenerator") or spec["generatorOptions"]["disableNameSuffixHash"]
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": item["name"]}}
        for item in spec.get("secretGenerator", [])
    ]


def raw(folder: Path) -> list[Doc]:
    docs = [doc for path in kustomize_files(folder) for doc in load(path)]
    return docs + generated(folder)


def rendered(folder: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the rendered overlay is not checked")
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def index(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def config(docs: list[Doc]) -> dict[str, str]:
    return {k: str(v) for k, v in index(docs)[("ConfigMap", "babelstream-config")]["data"].items()}


def settings_of(docs: list[Doc]) -> Settings:
    """The Settings the ConfigMap's values give (secrets left out), parsed by pydantic."""
    values: dict[str, dict[str, str]] = {}
    for key, value in config(docs).items():
        section, _, field = key[len(PREFIX) :].lower().partition("__")
        values.setdefault(section, {})[field] = value
    kafka = values.setdefault("kafka", {})
    if kafka.get("security_protocol", "").startswith("SASL_"):
        # each workload's own (its role's user, a patch of the cluster overlay)
        kafka.setdefault("sasl_username", "set-per-workload")
        kafka["sasl_password"] = "from-a-secret"
    return Settings.model_validate(values)


def strimzi_acl(grant: Grant) -> Doc:
    """A grant as an entry of a Strimzi KafkaUser's ``spec.authorization.acls``."""
    resource: Doc = {"type": STRIMZI_RESOURCES[grant.kind]}
    if grant.kind != "cluster":
        resource |= {"name": grant.name, "patternType": "prefix" if grant.prefixed else "literal"}
    operations = ["".join(w.capitalize() for w in op.name.split("_")) for op in grant.operations]
    return {"resource": resource, "operations": operations, "host": "*"}


def containers(workload: Doc) -> list[Doc]:
    return workload["spec"]["template"]["spec"]["containers"]


def check_references(docs: list[Doc]) -> None:
    by_key = index(docs)
    names = {kind: {name for (k, name) in by_key if k == kind} for kind, _ in by_key}
    settings = settings_of(docs)
    for key in config(docs):
        assert_setting_key(key, "ConfigMap babelstream-config")
    secrets = set(names.get("Secret", set())) | EXTERNAL_SECRETS
    for kafka in names.get("Kafka", set()):
        secrets.add(f"{kafka}-cluster-ca-cert")  # written by Strimzi
    secrets |= names.get("KafkaUser", set())  # Strimzi writes each user's password there
    workloads = {name: doc for (kind, name), doc in by_key.items() if kind in WORKLOADS}
    assert workloads, "no workloads"
    for name, workload in workloads.items():
        template_labels = workload["spec"]["template"]["metadata"]["labels"]
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= template_labels.items(), f"{name}: selector misses the pods"
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for volume in volumes.values():
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, (name, volume)
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert claim in names.get("PersistentVolumeClaim", set()), (name, claim)
        for container in containers(workload):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, (name, mount)
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in names["ConfigMap"], (name, source)
            for env in container.get("env", []):
                if env["name"].startswith(PREFIX):
                    assert_setting_key(env["name"], name)
                secret_ref = env.get("valueFrom", {}).get("secretKeyRef")
                if secret_ref:
                    assert secret_ref["name"] in secrets, (name, secret_ref)
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = container.get(probe_name, {}).get("httpGet")
                if probe:
                    assert probe["port"] in ports, (name, probe_name, probe)
    for (kind, name), service in by_key.items():
        if kind != "Service":
            continue
        matching = [
            w
            for w in workloads.values()
            if service["spec"]["selector"].items()
            <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matching) == 1, f"Service {name} selects {len(matching)} workloads"
        ports = {p["name"] for c in containers(matching[0]) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (name, port)

    worker = by_key[("StatefulSet", "babelstream-worker")]
    router = by_key[("StatefulSet", "babelstream-router")]
    # the router in a group of its own, the workers without one: each request routed once
    assert containers(router)[0]["args"] == ["worker", "--router-only"]
    assert containers(worker)[0]["args"] == ["worker", "--no-router"]
    assert by_key[("Service", worker["spec"]["serviceName"])]["spec"]["clusterIP"] == "None"
    (container,) = containers(worker)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "web": settings.worker.web_port,
        "metrics": settings.observability.metrics_port,
    }
    assert settings.worker.web_host == settings.observability.metrics_host == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"]["path"] == "/babelstream/ready"
    assert container["livenessProbe"]["httpGet"]["path"] != "/babelstream/ready"
    instance_id = {e["name"]: e for e in container["env"]}["BABELSTREAM_WORKER__INSTANCE_ID"]
    assert instance_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert settings.worker.static_membership
    pdbs = [doc for doc in docs if doc["kind"] == "PodDisruptionBudget"]
    assert any(
        pdb["spec"]["selector"]["matchLabels"].items()
        <= worker["spec"]["template"]["metadata"]["labels"].items()
        for pdb in pdbs
    )
    dashboard = containers(by_key[("Deployment", "babelstream-dashboard")])[0]
    assert dashboard["ports"][0]["containerPort"] == settings.dashboard.port
    gateway = by_key[("StatefulSet", "babelstream-gateway")]
    (container,) = containers(gateway)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": settings.gateway.port, "health": settings.gateway.health_port}
    assert settings.gateway.host == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/babelstream/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "health"}
    if "Kafka" in names:
        check_cluster(by_key, settings, secrets)


def check_cluster(
    by_key: dict[tuple[str, str], Doc], settings: Settings, secrets: set[str]
) -> None:
    """Strimzi Kafka, topics, user and the KEDA scaler agree with the settings."""
    (((_, kafka_name), kafka),) = [(k, d) for k, d in by_key.items() if k[0] == "Kafka"]
    kafka_config = kafka["spec"]["kafka"]["config"]
    assert kafka_config["default.replication.factor"] == settings.kafka.replication_factor == 3
    assert kafka_config["min.insync.replicas"] == settings.kafka.min_insync_replicas == 2
    assert kafka_config["offsets.topic.replication.factor"] == 3
    assert kafka_config["transaction.state.log.min.isr"] == 2
    pools = [d for k, d in by_key.items() if k[0] == "KafkaNodePool"]
    assert sum(p["spec"]["replicas"] for p in pools if "broker" in p["spec"]["roles"]) >= 3
    bootstrap = f"{kafka_name}-kafka-bootstrap"
    (listener,) = [
        item
        for item in kafka["spec"]["kafka"]["listeners"]
        if settings.kafka.bootstrap_servers == f"{bootstrap}:{item['port']}"
    ]
    assert listener["tls"] and listener["authentication"]["type"] == "scram-sha-512"
    assert settings.kafka.security_protocol == "SASL_SSL"
    assert settings.kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert kafka["spec"]["kafka"]["authorization"] == {"type": "simple"}
    users = {name: doc for (kind, name), doc in by_key.items() if kind == "KafkaUser"}
    for role in ROLES:
        grants = role_grants(role, settings.replies.prefix, settings.kafka.client_id)
        expected = [strimzi_acl(grant) for grant in grants]
        acls = users[role_user(role)]["spec"]["authorization"]["acls"]
        assert acls == expected, (
            f"kafka-user.yaml: {role_user(role)}'s ACLs are not pipeline/kafka/roles.py's; "
            f"they are:\n{yaml.safe_dump(expected, sort_keys=False, default_flow_style=None)}"
        )
    topics = {d["spec"]["topicName"]: d for k, d in by_key.items() if k[0] == "KafkaTopic"}
    specs = topic_specs(settings, registry_models(settings.engine.registry))
    assert set(topics) == set(specs)
    for name, topic in topics.items():
        assert re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", topic["metadata"]["name"])
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == kafka_name
        assert topic["spec"]["partitions"] == specs[name].partitions, name
        assert topic["spec"]["replicas"] == settings.kafka.replication_factor, name
        assert topic["spec"]["config"]["min.insync.replicas"] == str(
            settings.kafka.min_insync_replicas
        ), name
    (scaled,) = [d for k, d in by_key.items() if k[0] == "ScaledObject"]
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) in by_key
    assert scaled["spec"]["maxReplicaCount"] == settings.kafka.work_partitions
    model_topics = {work_topic(m) for m in registry_models(settings.engine.registry)}
    triggers = scaled["spec"]["triggers"]
    assert {t["metadata"]["topic"] for t in triggers} == model_topics
    for trigger in triggers:
        meta = trigger["metadata"]
        assert trigger["type"] == "kafka"
        assert meta["bootstrapServers"] == settings.kafka.bootstrap_servers
        assert meta["consumerGroup"] == APP_ID
        assert 0 < int(meta["activationLagThreshold"]) < int(meta["lagThreshold"])
        assert specs[meta["topic"]].partitions == settings.kafka.work_partitions
        auth = by_key[("TriggerAuthentication", trigger["authenticationRef"]["name"])]
        for ref in auth["spec"]["secretTargetRef"]:
            assert ref["name"] in secrets, ref


@pytest.mark.parametrize("path", sorted(K8S.rglob("*.yaml")), ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_parses(path: Path) -> None:
    docs = load(path)
    assert docs, path
    if path.name == "kustomization.yaml":
        return
    for doc in docs:
        if isinstance(doc, list):  # a JSON 6902 patch
            assert all({"op", "path"} <= set(op) for op in doc)
            continue
        assert {"apiVersion", "kind", "metadata"} <= set(doc), path
        assert doc["metadata"]["name"], path


def test_kustomization_paths_exist() -> None:
    for kustomization in K8S.rglob("kustomization.yaml"):
        folder = kustomization.parent
        spec = load(kustomization)[0]
        for entry in spec.get("resources", []):
            assert (folder / entry).exists(), (kustomization, entry)
        for patch in spec.get("patches", []):
            assert (folder / patch["path"]).is_file(), (kustomization, patch)


def test_base_references() -> None:
    check_references(raw(BASE))


def test_cluster_overlay_resources_reference_each_other() -> None:
    docs = raw(CLUSTER)
    patched = index(load(CLUSTER / "patches" / "config.yaml"))
    by_key = index(docs)
    by_key[("ConfigMap", "babelstream-config")]["data"].update(
        patched[("ConfigMap", "babelstream-config")]["data"]
    )
    check_references(list(by_key.values()))


@pytest.mark.parametrize("folder", [BASE, CLUSTER], ids=["base", "cluster"])
def test_rendered_kustomization_references(folder: Path) -> None:
    docs = rendered(folder)
    check_references(docs)
    if folder == CLUSTER:
        workloads = [doc for (kind, _), doc in index(docs).items() if kind in WORKLOADS]
        components = set()
        for doc in workloads:
            component = doc["metadata"]["labels"].get("app.kubernetes.io/component")
            if component not in COMPONENT_ROLES:
                continue
            components.add(component)
            env = {e["name"]: e for e in containers(doc)[0]["env"]}
            assert "BABELSTREAM_REDIS__PASSWORD" in env
            # the Kafka user of its role, with that user's password
            user = role_user(COMPONENT_ROLES[component])
            assert env["BABELSTREAM_KAFKA__SASL_USERNAME"]["value"] == user, component
            password = env["BABELSTREAM_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert password == {"name": user, "key": "password"}, component
        assert components == set(COMPONENT_ROLES)


def test_the_gpu_overlay_gives_each_worker_a_gpu_and_the_gpu_image() -> None:
    docs = index(rendered(K8S / "overlays" / "gpu"))
    worker = docs[("StatefulSet", "babelstream-worker")]
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "babelstream:gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BABELSTREAM_ENGINE__DEVICE"] == "cuda"
    assert_setting_key("BABELSTREAM_ENGINE__DEVICE", "overlays/gpu")


def test_the_base_runs_the_image_of_this_release() -> None:
    (spec,) = load(BASE / "kustomization.yaml")
    (image,) = spec["images"]
    assert image == {"name": "babelstream", "newTag": version("babelstream")}


def test_the_kubernetes_pages_overlay_renders_with_its_image_and_kafka(tmp_path: Path) -> None:
    """The step by step's own overlay (docs/operating/kubernetes.md), written beside a
    copy of the base as the page says, renders and refers to what exists."""
    page = (PROJECT_ROOT / "docs" / "operating" / "kubernetes.md").read_text(encoding="utf-8")
    (overlay,) = [block for block in code_blocks(page) if "kind: Kustomization" in block]
    image = f"registry.example.com/babelstream:{version('babelstream')}"
    assert f"docker build -t {image} ." in page
    shutil.copytree(BASE, tmp_path / "base")
    mine = tmp_path / "overlays" / "mine"
    mine.mkdir(parents=True)
    (mine / "kustomization.yaml").write_text(overlay, encoding="utf-8")
    docs = rendered(mine)
    check_references(docs)
    images = {c["image"] for doc in docs if doc["kind"] in WORKLOADS for c in containers(doc)}
    assert image in images and all(i == image or i.startswith("redis:") for i in images), images
    settings = settings_of(docs)
    assert settings.kafka.bootstrap_servers == "kafka-bootstrap.kafka.svc:9092"
    assert (settings.kafka.replication_factor, settings.kafka.min_insync_replicas) == (3, 2)
    assert {doc["metadata"].get("namespace") for doc in docs} == {"translation"}
