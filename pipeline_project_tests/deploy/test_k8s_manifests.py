"""deploy/k8s: every plain manifest against Kubernetes' schemas, every Strimzi resource against Strimzi's CRD
schemas, and the references between them (Secrets, the Kafka login and its ACLs) against the code."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pipeline_project.defs.resources.launchers import TrainerLaunch
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.ledger.records import ledger_topic
from pipeline_project.streaming.load.config import dead_letter_topic_for
from pipeline_project.streaming.retractions.topic import retractions_topic
from pipeline_project_tests.deploy.helpers import (
    K8S,
    STRIMZI_KINDS,
    k8s_manifests,
    validate_k8s,
    validate_strimzi,
)

BASE = k8s_manifests("base")
KAFKA = k8s_manifests("kafka")
TIERED = k8s_manifests("kafka/tiered")
SHARED = k8s_manifests("kafka/shared")


def _ids(items):
    return [f"{path.parent.name}/{path.name}:{doc['kind']}/{doc['metadata']['name']}" for path, doc in items]


@pytest.mark.parametrize(("path", "doc"), BASE, ids=_ids(BASE))
def test_plain_manifests_fit_the_kubernetes_schemas(path, doc):
    validate_k8s(doc)


@pytest.mark.parametrize(("path", "doc"), KAFKA + TIERED + SHARED, ids=_ids(KAFKA + TIERED + SHARED))
def test_strimzi_resources_fit_strimzis_crd_schemas(path, doc):
    assert doc["kind"] in STRIMZI_KINDS
    validate_strimzi(doc)


def test_the_validators_reject_what_they_should():
    """Both checks are live: an unknown field and a wrong type fail them."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolcy": "Always"}]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_k8s(pod)
    topic = copy.deepcopy(next(doc for _, doc in KAFKA if doc["kind"] == "KafkaTopic"))
    topic["spec"]["partitons"] = 8
    with pytest.raises(jsonschema.ValidationError):
        validate_strimzi(topic)
    topic = copy.deepcopy(next(doc for _, doc in KAFKA if doc["kind"] == "KafkaTopic"))
    topic["spec"]["replicas"] = "three"
    with pytest.raises(jsonschema.ValidationError):
        validate_strimzi(topic)


def test_everything_is_in_the_pipeline_namespace():
    for path, doc in BASE + KAFKA:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "pipeline", (
                f"{path.name}: {doc['kind']}/{doc['metadata']['name']}"
            )


def _strimzi_secrets() -> set[str]:
    """The Secrets Strimzi writes: `<cluster>-cluster-ca-cert` and one per KafkaUser, named after it."""
    names = {f"{doc['metadata']['name']}-cluster-ca-cert" for _, doc in KAFKA if doc["kind"] == "Kafka"}
    return names | {doc["metadata"]["name"] for _, doc in KAFKA if doc["kind"] == "KafkaUser"}


def _referenced_secrets(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        for key in ("secretKeyRef", "secretRef"):
            if isinstance(node.get(key), dict):
                found.add(node[key]["name"])
        if isinstance(node.get("secret"), dict) and "secretName" in node["secret"]:
            found.add(node["secret"]["secretName"])
        for value in node.values():
            found |= _referenced_secrets(value)
    elif isinstance(node, list):
        for value in node:
            found |= _referenced_secrets(value)
    return found


def _settings() -> dict[str, str]:
    (doc,) = [doc for _, doc in BASE if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "pipeline-settings"]
    return doc["data"]


def test_every_referenced_secret_is_documented_or_written_by_strimzi():
    from pipeline_project.defs.resources.launchers import k8s_pod_spec

    provided = {doc["metadata"]["name"] for _, doc in BASE if doc["kind"] == "Secret"} | _strimzi_secrets()
    values = yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())
    trainer = k8s_pod_spec(TrainerLaunch.from_json(_settings()["PIPELINE_TRAINER_LAUNCH"]))
    used = _referenced_secrets([doc for _, doc in BASE]) | _referenced_secrets(values) | _referenced_secrets(trainer)
    assert used <= provided, f"referenced but never created: {sorted(used - provided)}"
    assert values["global"]["postgresqlSecretName"] in provided


def test_the_kafka_login_is_what_the_settings_and_the_acls_expect():
    (user,) = [doc for _, doc in KAFKA if doc["kind"] == "KafkaUser"]
    (cluster,) = [doc for _, doc in KAFKA if doc["kind"] == "Kafka"]
    settings = _settings()
    (listener,) = [
        listener
        for listener in cluster["spec"]["kafka"]["listeners"]
        if settings["PIPELINE_KAFKA_BOOTSTRAP"].endswith(f":{listener['port']}")
    ]
    assert listener["tls"] and listener["authentication"]["type"] == "scram-sha-512"
    assert settings["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL" and settings["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert settings["KAFKA_SASL_USERNAME"] == user["metadata"]["name"]
    assert settings["PIPELINE_KAFKA_BOOTSTRAP"].startswith(f"{cluster['metadata']['name']}-kafka-bootstrap.")
    assert user["spec"]["authentication"]["type"] == "scram-sha-512"

    acls = {
        (a["resource"]["type"], a["resource"]["name"], a["resource"].get("patternType", "literal")): set(
            a["operations"]
        )
        for a in user["spec"]["authorization"]["acls"]
    }
    topic = PipelineLayout().topic.name
    assert settings["PIPELINE_TOPIC"] == topic
    for name in (topic, ledger_topic(topic)):
        # ensure_topic: CreateTopics (authorized before "already exists"), DescribeConfigs; producer, loader
        assert {"Create", "Describe", "DescribeConfigs", "Read", "Write"} <= acls[("topic", name, "literal")]
    # the retractions: the trainer's loaders read them (RetractionReader: Describe for the watermarks, Read);
    # `ledger retire` and the operator's commands check the topic (ensure_retractions_topic) and write a request
    assert {"Describe", "Read"} | {"Create", "DescribeConfigs", "Write"} <= acls[
        ("topic", retractions_topic(topic), "literal")
    ]
    # the loader's dead letters: ensure_topic on the first one, then produce
    assert {"Create", "Describe", "DescribeConfigs", "Write"} <= acls[
        ("topic", dead_letter_topic_for(topic), "literal")
    ]
    client_id = KafkaSettings.model_fields["client_id"].default
    # transactional ids are f"{client_id}.{topic}.{batch}" (streaming.producer.transactional_id_for)
    assert {"Describe", "Write"} <= acls[("transactionalId", f"{client_id}.", "prefix")]
    assert KafkaSettings(bootstrap_servers="b:1").consumer_config()["group.id"].startswith(f"{client_id}.")
    assert {"Read"} <= acls[("group", f"{client_id}.", "prefix")]


def test_the_trainer_pod_of_the_cluster_settings_mounts_the_kafka_ca_where_the_settings_say():
    launch = TrainerLaunch.from_json(_settings()["PIPELINE_TRAINER_LAUNCH"])
    assert launch.launcher == "k8s" and launch.image
    ca_path = _settings()["KAFKA_SSL_CA_LOCATION"]
    (cluster,) = [doc for _, doc in KAFKA if doc["kind"] == "Kafka"]
    mount = launch.secret_volumes[f"{cluster['metadata']['name']}-cluster-ca-cert"]
    assert ca_path == f"{mount}/ca.crt"


def test_the_tiered_cluster_is_the_base_one_with_the_token_topic_tiered():
    """deploy/k8s/kafka/tiered/ differs from deploy/k8s/kafka/ only where tiering needs it."""
    base = {(d["kind"], d["metadata"]["name"]): d for _path, d in KAFKA}
    tiered = {(d["kind"], d["metadata"]["name"]): d for _path, d in TIERED}
    assert set(tiered) == set(base) - {("KafkaUser", "pipeline")}
    kafka, tiered_kafka = base[("Kafka", "pipeline-kafka")]["spec"], tiered[("Kafka", "pipeline-kafka")]["spec"]
    extra = tiered_kafka["kafka"]
    assert extra["tieredStorage"]["type"] == "custom"
    assert {k: v for k, v in extra["config"].items() if not k.startswith("rlmm.")} == kafka["kafka"]["config"]
    # the tiered image is built for one Kafka version, which it names; the base cluster leaves it to the operator
    assert "version" not in kafka["kafka"] and extra["image"].endswith(f":{extra['version']}")
    assert {k: v for k, v in extra.items() if k not in ("tieredStorage", "config", "image", "version")} == {
        k: v for k, v in kafka["kafka"].items() if k != "config"
    }
    assert {k: v for k, v in tiered_kafka.items() if k != "kafka"} == {k: v for k, v in kafka.items() if k != "kafka"}
    nodes, tiered_nodes = base[("KafkaNodePool", "combined")]["spec"], tiered[("KafkaNodePool", "combined")]["spec"]
    assert {k: v for k, v in tiered_nodes.items() if k != "storage"} == {
        k: v for k, v in nodes.items() if k != "storage"
    }
    topic = tiered[("KafkaTopic", "token-blocks")]["spec"]
    assert topic["config"]["remote.storage.enable"] is True and topic["config"]["retention.ms"] == -1
    base_topic = base[("KafkaTopic", "token-blocks")]["spec"]
    assert {k: v for k, v in topic.items() if k != "config"} == {k: v for k, v in base_topic.items() if k != "config"}
    assert tiered[("KafkaTopic", "token-blocks.ledger")] == base[("KafkaTopic", "token-blocks.ledger")]


def _placed(doc: dict, namespace: str, cluster: str) -> dict:
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    doc["metadata"]["labels"]["strimzi.io/cluster"] = cluster
    return doc


def test_the_shared_cluster_path_is_the_pipelines_topics_and_login_on_another_cluster():
    """deploy/k8s/kafka/shared/: the same KafkaTopics and KafkaUser for a Kafka the team already runs."""
    ((_, first), *_rest) = SHARED
    namespace, cluster = first["metadata"]["namespace"], first["metadata"]["labels"]["strimzi.io/cluster"]
    own = [doc for _, doc in KAFKA if doc["kind"] in ("KafkaTopic", "KafkaUser")]
    assert [doc for _, doc in SHARED] == [_placed(doc, namespace, cluster) for doc in own]
    assert not any(doc["kind"] in ("Kafka", "KafkaNodePool") for _, doc in SHARED)


def test_the_steps_use_the_clusters_strimzi_and_state_its_range():
    """No second operator: the steps install none, and say which Strimzi serves the resources (v1: 0.49.0 on)."""
    readme = (K8S.parent / "README.md").read_text()
    assert "strimzi-kafka-operator" not in readme and "helm install strimzi" not in readme
    assert "Strimzi operator, 0.49.0 or newer" in readme
    assert {doc["apiVersion"] for _, doc in KAFKA + TIERED + SHARED} == {"kafka.strimzi.io/v1"}
    (cluster,) = [doc for _, doc in KAFKA if doc["kind"] == "Kafka"]
    assert "version" not in cluster["spec"]["kafka"]  # the operator's default Kafka
