"""The environment each deployed pipeline process gets, rendered from the deploy files: which variable names
reach it (ConfigMap envFrom, Secrets, explicit env), for test_pod_settings.py."""

from __future__ import annotations

import re
from typing import Any

import yaml

from pipeline_project.defs.resources.launchers import TrainerLaunch, jobset_manifest, k8s_pod_spec, render_k8s_pod
from pipeline_project_tests.deploy.helpers import COMPOSE, K8S, REPO, k8s_manifests

ENV_NAME = r"[A-Z][A-Z0-9_]{2,}"


def settings_reads() -> set[str]:
    """Every variable pipeline_project/settings.py reads: `_env("X"`, `_env_or_none("X"`, `os.environ...("X"`,
    `_local_url("X"` (its port variable), and the same calls with a module constant `X_ENV = "X"`."""
    text = (REPO / "pipeline_project" / "settings.py").read_text()
    constants = dict(re.findall(rf'^(\w+) = "({ENV_NAME})"', text, flags=re.M))
    calls = r"(?:_env|_env_or_none|_local_url|os\.environ\.get|os\.environ\[)\(?\s*"
    names = set(re.findall(rf"""{calls}["']({ENV_NAME})["']""", text))
    names |= {constants[c] for c in re.findall(rf"{calls}(\w+)\s*[,)\]]", text) if c in constants}
    return names


def _k8s_docs(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in k8s_manifests("base") if doc["kind"] == kind]


def _config_map(name: str) -> set[str]:
    (doc,) = [doc for doc in _k8s_docs("ConfigMap") if doc["metadata"]["name"] == name]
    return set(doc["data"])


def _secret(name: str) -> set[str]:
    (doc,) = [doc for doc in _k8s_docs("Secret") if doc["metadata"]["name"] == name]
    return set(doc["stringData"])


def container_env(container: dict[str, Any]) -> set[str]:
    """Names a Kubernetes container gets: env entries, and every key of the ConfigMaps / Secrets of envFrom."""
    names = {entry["name"] for entry in container.get("env", [])}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            names |= _config_map(source["configMapRef"]["name"])
        if "secretRef" in source:
            names |= _secret(source["secretRef"]["name"])
    return names


def settings_data() -> dict[str, str]:
    (doc,) = [doc for doc in _k8s_docs("ConfigMap") if doc["metadata"]["name"] == "pipeline-settings"]
    return doc["data"]


def trainer_launch() -> TrainerLaunch:
    return TrainerLaunch.from_json(settings_data()["PIPELINE_TRAINER_LAUNCH"])


def trainer_pod_env() -> set[str]:
    """The trainer Pod as PipesK8sClient builds it (dagster-k8s's build_pod_body) from the cluster's launch."""
    from pipeline_project_tests.deploy.test_trainer_job_env import _job

    pod = render_k8s_pod(trainer_launch(), _job())
    assert k8s_pod_spec(trainer_launch())["containers"][0]["envFrom"] == pod["spec"]["containers"][0]["envFrom"]
    return container_env(pod["spec"]["containers"][0])


def jobset_pod_env() -> set[str]:
    (doc,) = [doc for _, doc in k8s_manifests("training") if doc["kind"] == "JobSet"]
    (replicated,) = doc["spec"]["replicatedJobs"]
    return container_env(replicated["template"]["spec"]["template"]["spec"]["containers"][0])


def jobset_rendered_env() -> set[str]:
    """The JobSet as the launchers module renders it from the cluster's TrainerLaunch."""
    manifest = jobset_manifest(trainer_launch(), name="n", nodes=2, job_configmap="deepseek-job", namespace="p")
    (replicated,) = manifest["spec"]["replicatedJobs"]
    return container_env(replicated["template"]["spec"]["template"]["spec"]["containers"][0])


def _helm_values() -> dict[str, Any]:
    return yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())


def helm_user_code_env() -> set[str]:
    """The user-code deployment (the chart turns envConfigMaps / envSecrets into envFrom)."""
    (deployment,) = _helm_values()["dagster-user-deployments"]["deployments"]
    container = {
        "env": deployment.get("env", []),
        "envFrom": [{"configMapRef": {"name": c["name"]}} for c in deployment.get("envConfigMaps", [])]
        + [{"secretRef": {"name": s["name"]}} for s in deployment.get("envSecrets", [])],
    }
    return container_env(container)


def helm_run_pod_env() -> set[str]:
    """A run pod of K8sRunLauncher, as the chart and dagster-k8s build it (helm_render.py)."""
    from pipeline_project_tests.deploy import helm_render

    (container,) = helm_render.run_pod_spec()["containers"]
    return container_env(container)


def compose_env(service: str) -> set[str]:
    services = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]
    env = services[service].get("environment", {})
    return set(env) if isinstance(env, dict) else {e.split("=", 1)[0] for e in env}
