"""deploy/k8s/dagster/values.yaml, for Dagster's Helm chart 1.13.

The chart itself is on no registry this project's CI reaches (not on PyPI, npm or Maven Central: dagster-k8s
ships the launcher, not the chart), so `helm template` cannot render it here, and its values.schema.json cannot
be fetched either. What is checked instead:
- every key path the values use is one the chart's values schema defines (`CHART_KEYS`, transcribed by hand from
  the chart's schema models, helm/dagster/schema in the dagster repository, 1.13 line); an unknown or misspelt key
  fails. Not checked: value types and enums of that schema, and keys of the chart newer than the transcription;
- the instance the chart renders from runMonitoring, runRetries and computeLogManager (the templates' key maps,
  test_instance_config.py) against Dagster's own instance schema, so a key the templates drop fails there;
- the Kubernetes pieces inside the values (env, volumes, mounts, resources, security contexts, the run pod's spec)
  are checked against Kubernetes' own schemas, inside a Pod;
- the instance policy equals deploy/dagster/dagster.yaml (run queue, limits, pools, retries, monitoring);
- the user deployment serves the module that pyproject.toml and workspace.yaml name.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from pipeline_project_tests.deploy.helpers import DEPLOY, K8S, REPO, validate_k8s
from pipeline_project_tests.deploy.test_instance_config import CHART_RUN_MONITORING, CHART_RUN_RETRIES

ANY = "any"  # a scalar, or a subtree the chart passes through without a schema of its own
K8S_ENV = "k8s:env"
K8S_VOLUMES = "k8s:volumes"
K8S_MOUNTS = "k8s:volumeMounts"
K8S_RESOURCES = "k8s:resources"
K8S_POD_SPEC = "k8s:podSpec"
K8S_CONTAINER = "k8s:container"
K8S_POD_SECURITY = "k8s:podSecurityContext"
K8S_SECURITY = "k8s:securityContext"
_IMAGE = {"repository": ANY, "tag": ANY, "pullPolicy": ANY}
_SERVICE_ACCOUNT = {"create": ANY, "name": ANY, "annotations": ANY}
_POD_SECURITY = {"podSecurityContext": K8S_POD_SECURITY, "securityContext": K8S_SECURITY}

_USER_DEPLOYMENT = {
    "name": ANY,
    "image": _IMAGE,
    "port": ANY,
    "dagsterApiGrpcArgs": ANY,
    "codeServerArgs": ANY,
    "includeConfigInLaunchedRuns": {"enabled": ANY},
    "env": K8S_ENV,
    "envConfigMaps": [{"name": ANY, "optional": ANY}],
    "envSecrets": [{"name": ANY, "optional": ANY}],
    "annotations": ANY,
    "nodeSelector": ANY,
    "affinity": ANY,
    "tolerations": ANY,
    **_POD_SECURITY,
    "resources": K8S_RESOURCES,
    "livenessProbe": ANY,
    "readinessProbe": ANY,
    "startupProbe": ANY,
    "labels": ANY,
    "volumeMounts": K8S_MOUNTS,
    "volumes": K8S_VOLUMES,
    "schedulerName": ANY,
}

CHART_KEYS: dict[str, Any] = {
    "global": {
        "postgresqlSecretName": ANY,
        "dagsterHome": ANY,
        "serviceAccountName": ANY,
        "celeryConfigSecretName": ANY,
    },
    "serviceAccount": _SERVICE_ACCOUNT,
    "telemetry": {"enabled": ANY},
    "postgresql": {
        "enabled": ANY,
        "image": {"repository": ANY, "tag": ANY, "pullPolicy": ANY},
        "postgresqlHost": ANY,
        "postgresqlUsername": ANY,
        "postgresqlPassword": ANY,
        "postgresqlDatabase": ANY,
        "postgresqlParams": ANY,
        "postgresqlScheme": ANY,
        "service": {"port": ANY},
    },
    "generatePostgresqlPasswordSecret": ANY,
    "dagster-user-deployments": {
        "enabled": ANY,
        "enableSubchart": ANY,
        "imagePullSecrets": ANY,
        "serviceAccount": _SERVICE_ACCOUNT,
        "deployments": [_USER_DEPLOYMENT],
    },
    "runLauncher": {
        "type": ANY,
        "config": {
            "k8sRunLauncher": {
                "image": ANY,
                "imagePullPolicy": ANY,
                "jobNamespace": ANY,
                "loadInclusterConfig": ANY,
                "kubeconfigFile": ANY,
                "envConfigMaps": ANY,
                "envSecrets": ANY,
                "envVars": ANY,
                "volumeMounts": K8S_MOUNTS,
                "volumes": K8S_VOLUMES,
                "labels": ANY,
                "failPodOnRunFailure": ANY,
                "resources": K8S_RESOURCES,
                "schedulerName": ANY,
                "securityContext": ANY,
                "runK8sConfig": {
                    "containerConfig": K8S_CONTAINER,
                    "podSpecConfig": K8S_POD_SPEC,
                    "podTemplateSpecMetadata": ANY,
                    "jobSpecConfig": ANY,  # validated as a batch/v1 JobSpec in test_instance_config.py
                    "jobMetadata": ANY,
                },
            }
        },
    },
    "dagsterDaemon": {
        "image": _IMAGE,
        **_POD_SECURITY,
        "runCoordinator": {
            "enabled": ANY,
            "type": ANY,
            "config": {
                "queuedRunCoordinator": {
                    "maxConcurrentRuns": ANY,
                    "tagConcurrencyLimits": ANY,
                    "dequeueIntervalSeconds": ANY,
                    "dequeueNumWorkers": ANY,
                    "dequeueUseThreads": ANY,
                }
            },
        },
        # Dict[str, Any] in the schema; these are the keys configmap-instance.yaml reads (test_instance_config.py
        # validates what they render to against Dagster's instance schema)
        "runMonitoring": dict.fromkeys(CHART_RUN_MONITORING, ANY),
        "runRetries": dict.fromkeys(CHART_RUN_RETRIES, ANY),
        "envSecrets": [{"name": ANY, "optional": ANY}],
    },
    "dagsterWebserver": {"image": _IMAGE, **_POD_SECURITY, "envSecrets": [{"name": ANY, "optional": ANY}]},
    "computeLogManager": {
        "type": ANY,
        # the S3 keys are checked against what _compute-log-manager.tpl reads in test_instance_config.py
        "config": {"s3ComputeLogManager": ANY},
    },
    "concurrency": {
        "enabled": ANY,
        "pools": {"defaultLimit": ANY, "granularity": ANY, "opGranularityRunBuffer": ANY},
        "runs": {"maxConcurrentRuns": ANY, "tagConcurrencyLimits": [{"key": ANY, "value": ANY, "limit": ANY}]},
    },
}


def _values() -> dict[str, Any]:
    return yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())


def _walk(value: Any, allowed: Any, path: str, k8s: list[tuple[str, str, Any]]) -> list[str]:
    """Unknown key paths under `path`; the Kubernetes-typed subtrees are collected into `k8s`."""
    if allowed == ANY:
        return []
    if isinstance(allowed, str):
        k8s.append((allowed, path, value))
        return []
    if isinstance(allowed, list):
        assert isinstance(value, list), f"{path}: expected a list"
        return [bad for i, item in enumerate(value) for bad in _walk(item, allowed[0], f"{path}[{i}]", k8s)]
    assert isinstance(value, dict), f"{path}: expected a mapping"
    bad = [f"{path}.{key}".lstrip(".") for key in value if key not in allowed]
    return bad + [b for key, v in value.items() if key in allowed for b in _walk(v, allowed[key], f"{path}.{key}", k8s)]


def test_values_use_only_keys_the_chart_defines():
    k8s: list = []
    assert _walk(_values(), CHART_KEYS, "", k8s) == []


def test_the_kubernetes_pieces_of_the_values_are_valid_kubernetes():
    k8s: list = []
    _walk(_values(), CHART_KEYS, "", k8s)
    container: dict[str, Any] = {"name": "c", "image": "i"}
    pod_spec: dict[str, Any] = {"containers": [container], "volumes": []}
    for kind, path, value in k8s:
        if kind in (K8S_ENV, K8S_MOUNTS, K8S_RESOURCES):
            container.setdefault(kind.split(":")[1], [] if kind != K8S_RESOURCES else {})
            if kind == K8S_RESOURCES:
                container["resources"] = value
            else:
                container[kind.split(":")[1]] += value
        elif kind == K8S_VOLUMES:
            pod_spec["volumes"] += value
        elif kind == K8S_CONTAINER:
            container.update(value)
        elif kind == K8S_POD_SPEC:
            pod_spec.update(value)
        elif kind == K8S_POD_SECURITY:
            pod_spec["securityContext"] = value
        elif kind == K8S_SECURITY:
            container["securityContext"] = value
        else:
            raise AssertionError(f"{path}: unhandled {kind}")
    validate_k8s({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "values"}, "spec": pod_spec})
    mounts = {m["name"] for m in container.get("volumeMounts", [])}
    assert mounts <= {v["name"] for v in pod_spec["volumes"]}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _camel_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {_camel(k): _camel_keys(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_camel_keys(v) for v in node]
    return node


def test_the_instance_policy_equals_deploy_dagster_yaml():
    instance = yaml.safe_load((DEPLOY / "dagster" / "dagster.yaml").read_text())
    values = _values()
    daemon = values["dagsterDaemon"]
    assert (
        daemon["runCoordinator"]["enabled"] and instance["run_coordinator"]["class"] == daemon["runCoordinator"]["type"]
    )
    assert daemon["runRetries"] == _camel_keys(instance["run_retries"])
    # max_runtime_seconds is not passed on by the chart: its equivalent is the run Job's activeDeadlineSeconds
    monitoring = {k: v for k, v in instance["run_monitoring"].items() if k != "max_runtime_seconds"}
    assert daemon["runMonitoring"] == _camel_keys(monitoring)
    job_spec = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["jobSpecConfig"]
    assert job_spec["activeDeadlineSeconds"] == instance["run_monitoring"]["max_runtime_seconds"]
    s3_logs = values["computeLogManager"]["config"]["s3ComputeLogManager"]
    logs = instance["compute_logs"]["config"]
    assert (s3_logs["prefix"], s3_logs["uploadInterval"]) == (logs["prefix"], logs["upload_interval"])
    concurrency = values["concurrency"]
    assert concurrency["enabled"] is True
    assert {k: v for k, v in concurrency.items() if k != "enabled"} == _camel_keys(instance["concurrency"])
    # the chart refuses run limits in both places; they live under `concurrency`. The queue's own setting is here
    assert daemon["runCoordinator"]["config"]["queuedRunCoordinator"] == _camel_keys(
        instance["run_coordinator"]["config"]
    )


def test_the_user_deployment_serves_the_project_module_and_runs_on_k8s():
    values = _values()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    module = re.search(r'module_name = "([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert deployment["codeServerArgs"] == ["-m", module]
    assert module in (REPO / "workspace.yaml").read_text()
    # off: the code server's container context would override the run pods' resources and service account
    # (test_helm_run_pods.py); the runs get their settings from runK8sConfig
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is False
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False and values["generatePostgresqlPasswordSecret"] is False
    # CloudNativePG Cluster dagster-db's primary (deploy/k8s/postgres/clusters.yaml; test_postgres.py checks the rest)
    assert values["postgresql"]["postgresqlHost"].split(".")[0] == "dagster-db-rw"
    assert re.fullmatch(r"\d+\.\d+\.\d+", str(deployment["image"]["tag"]))  # a fixed tag, never latest
    assert deployment["envConfigMaps"] == [{"name": "pipeline-settings"}]
