"""Every setting a deployed process needs reaches it: each variable pipeline_project/settings.py reads is in
the environment of every pod and service the deploy files define (from the settings ConfigMap by envFrom, from a
Secret, or set explicitly), unless it is listed below with the reason it is absent."""

from __future__ import annotations

import pytest

from pipeline_project_tests.deploy import pod_env

# Absent everywhere on purpose.
ABSENT = {
    "PIPELINE_STATE_DIR": "the embedded local stack's state dir; no deployment runs that stack",
    "PIPELINE_KAFKA_SECURITY": "the embedded local stack's Kafka profile",
    "PIPELINE_KAFKA_PORTS": "the embedded local stack's ports; deployments set PIPELINE_KAFKA_BOOTSTRAP",
    "PIPELINE_MLFLOW_PORT": "local stack port; deployments set MLFLOW_TRACKING_URI",
    "PIPELINE_DAGSTER_PORT": "local stack port; deployments set PIPELINE_DAGSTER_URL",
    "PIPELINE_POSTGRES_PORT": "local stack port; deployments set PIPELINE_POSTGRES_URL",
    "PIPELINE_PUSHGATEWAY_PORT": "local stack port; deployments set PIPELINE_PUSHGATEWAY_URL",
    "WORLD_SIZE": "set by torchrun in each trainer process, never by a deployment",
    "PIPELINE_DEDUP_SHARD_URLS": "unset: one dedup index at PIPELINE_POSTGRES_URL; a deployment that splits it adds "
    "the shards' URLs (deploy/README.md, docs/limits.md: takedown and retune reach only the main database yet)",
    "RANK": "set by torchrun",
    "LOCAL_RANK": "set by torchrun",
    "PIPELINE_TRAIN_MODEL": "the model is each deployment's choice (a preset or a TrainConfig); unset: TrainConfig's",
    "PIPELINE_LINEAGE": "the default lineage (`deepseek`) until a deployment starts another",
    "PIPELINE_TRAIN_PARALLELISM": "TrainConfig's default (ddp) until a deployment's model needs fsdp",
    "PIPELINE_TRIGGER_RETRY_BASE_S": "the trigger's back-off defaults (60 s doubling) suit every deployment",
    "PIPELINE_TRIGGER_RETRY_MAX_S": "the trigger's back-off defaults (at most 1 h) suit every deployment",
}
# Absent on the cluster on purpose.
ABSENT_K8S = {
    "PIPELINE_S3_ENDPOINT": "AWS S3 itself (boto3's endpoint); another S3-protocol store adds it to the ConfigMap",
}
# Absent in compose on purpose.
ABSENT_COMPOSE = {
    "KAFKA_SECURITY_PROTOCOL": "compose's brokers listen in plaintext on the compose network",
    "KAFKA_SASL_MECHANISM": "plaintext brokers",
    "KAFKA_SASL_USERNAME": "plaintext brokers",
    "KAFKA_SASL_PASSWORD": "plaintext brokers",
    "KAFKA_SSL_CA_LOCATION": "plaintext brokers",
    "PIPELINE_TRAINER_LAUNCH": "unset means the subprocess launcher: the trainer runs inside the user-code service",
    "PIPELINE_INTAKE": "one host: IntakeConfig's defaults (1 GiB batches, 100 a tick) outrun what it can clean",
}


def _required(extra_absent: dict[str, str]) -> set[str]:
    return pod_env.settings_reads() - set(ABSENT) - set(extra_absent)


def test_the_settings_scan_sees_what_settings_py_reads():
    reads = pod_env.settings_reads()
    assert {"AWS_REGION", "PIPELINE_KAFKA_BOOTSTRAP", "AWS_ACCESS_KEY_ID", "PIPELINE_MLFLOW_PORT", "RANK"} <= reads
    assert set(ABSENT) | set(ABSENT_K8S) | set(ABSENT_COMPOSE) <= reads | {"KAFKA_SASL_PASSWORD"}


K8S_PODS = {
    "trainer pod (PipesK8sClient)": pod_env.trainer_pod_env,
    "trainer JobSet (deploy/k8s/training/jobset.yaml)": pod_env.jobset_pod_env,
    "trainer JobSet as rendered": pod_env.jobset_rendered_env,
    "user-code deployment (Helm)": pod_env.helm_user_code_env,
    "run pod (Helm, K8sRunLauncher)": pod_env.helm_run_pod_env,
}


@pytest.mark.parametrize("pod", list(K8S_PODS))
def test_every_setting_reaches_each_cluster_pod(pod):
    missing = _required(ABSENT_K8S) - K8S_PODS[pod]()
    assert not missing, f"{pod} lacks {sorted(missing)}"


@pytest.mark.parametrize("service", ["user-code", "dagster-daemon", "dagster-webserver"])
def test_every_setting_reaches_each_compose_service(service):
    missing = _required(ABSENT_COMPOSE) - pod_env.compose_env(service)
    assert not missing, f"compose service {service} lacks {sorted(missing)}"


def test_the_kafka_password_reaches_the_cluster_pods_from_the_strimzi_secret():
    for pod, env in K8S_PODS.items():
        assert "KAFKA_SASL_PASSWORD" in env(), pod
