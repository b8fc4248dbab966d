"""What Dagster's Helm chart (1.13) makes of deploy/k8s/dagster/values.yaml for a run, without helm: the two
templates that decide a run pod, transcribed, and the installed dagster-k8s that turns them into the Job.

- `user_code_container_context`: `dagsterUserDeployments.k8sContainerContext`
  (helm/dagster/charts/dagster-user-deployments/templates/helpers/_helpers.tpl), the JSON the chart puts in the code
  server's DAGSTER_CONTAINER_CONTEXT when `includeConfigInLaunchedRuns` is on; the code server stamps it on every
  run it launches (the run's `job_code_origin.repository_origin.container_context`).
- `run_launcher_config`: `dagsterYaml.runLauncher.k8s` (helm/dagster/templates/helpers/instance/_run-launcher.tpl),
  the K8sRunLauncher of the instance ConfigMap.
- `run_job`: K8sRunLauncher itself (dagster-k8s in .venv) launching a run with that origin: its own
  `_launch_k8s_job_with_args`, with the Kubernetes API replaced by a recorder, so the container contexts merge
  (`K8sContainerContext.create_for_run`) exactly as on a cluster.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any
from unittest import mock

import yaml

from pipeline_project_tests.deploy.helpers import K8S

RELEASE = "dagster"  # `helm upgrade --install dagster ...` (deploy/README.md)
NAMESPACE = "pipeline"
SUBCHART = "dagster-user-deployments"
DAGSTER_HOME = "/opt/dagster/dagster_home"  # the chart's global.dagsterHome default


def values() -> dict[str, Any]:
    return yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())


def fullname(chart: str) -> str:
    """`dagster.fullname` without name overrides: the release name when it contains the chart's name."""
    return RELEASE if chart in RELEASE else f"{RELEASE}-{chart}"


def main_service_account(vals: dict[str, Any]) -> str:
    """`dagster.serviceAccountName`: the webserver's, the daemon's, and the run launcher's default."""
    return vals.get("global", {}).get("serviceAccountName") or vals.get("serviceAccount", {}).get("name") or RELEASE


def user_code_service_account(vals: dict[str, Any]) -> str:
    """`dagsterUserDeployments.serviceAccountName`: the code servers'."""
    sub = vals.get(SUBCHART, {}).get("serviceAccount", {})
    default = f"{fullname(SUBCHART)}-user-deployments"
    return vals.get("global", {}).get("serviceAccountName") or sub.get("name") or default


def image_name(image: dict[str, Any]) -> str:
    return f"{image['repository']}:{image['tag']}"


def _names(refs: list[dict[str, Any]] | None) -> list[str]:
    return [ref["name"] for ref in refs or [] if "name" in ref]


# long: a transcription of the template, key for key, reads best in its order
def user_code_container_context(vals: dict[str, Any], deployment: dict[str, Any]) -> dict[str, Any] | None:
    """The container context the chart hands the runs of `deployment`; None with includeConfigInLaunchedRuns off."""
    if not (deployment.get("includeConfigInLaunchedRuns") or {"enabled": True})["enabled"]:
        return None
    k8s: dict[str, Any] = {"image_pull_policy": deployment["image"]["pullPolicy"]}
    if vals.get(SUBCHART, {}).get("imagePullSecrets"):
        k8s["image_pull_secrets"] = vals[SUBCHART]["imagePullSecrets"]
    k8s["env_config_maps"] = [
        f"{fullname(SUBCHART)}-{deployment['name']}-user-env",
        *_names(deployment.get("envConfigMaps")),
    ]
    if deployment.get("envSecrets"):
        k8s["env_secrets"] = _names(deployment["envSecrets"])
    for key, field in (
        ("volumeMounts", "volume_mounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
        ("schedulerName", "scheduler_name"),
    ):
        if deployment.get(key):
            k8s[field] = copy.deepcopy(deployment[key])
    k8s["namespace"] = NAMESPACE
    k8s["service_account_name"] = user_code_service_account(vals)
    if isinstance(deployment.get("env"), list) and deployment["env"]:
        k8s["env"] = copy.deepcopy(deployment["env"])
    pod_spec_config: dict[str, Any] = {"automount_service_account_token": True}
    if deployment.get("sidecarContainers"):
        pod_spec_config["containers"] = deployment["sidecarContainers"]
    if deployment.get("initContainers"):
        pod_spec_config["init_containers"] = deployment["initContainers"]
    k8s["run_k8s_config"] = {"pod_spec_config": pod_spec_config}
    if deployment.get("annotations"):
        k8s["run_k8s_config"]["pod_template_spec_metadata"] = {"annotations": deployment["annotations"]}
    return {"k8s": k8s}


RUN_K8S_CONFIG = {
    "containerConfig": "container_config",
    "podSpecConfig": "pod_spec_config",
    "podTemplateSpecMetadata": "pod_template_spec_metadata",
    "jobSpecConfig": "job_spec_config",
    "jobMetadata": "job_metadata",
}
_OPTIONAL = {
    "envVars": "env_vars",
    "volumeMounts": "volume_mounts",
    "volumes": "volumes",
    "labels": "labels",
    "resources": "resources",
    "schedulerName": "scheduler_name",
    "securityContext": "security_context",
}


def run_launcher_config(vals: dict[str, Any]) -> dict[str, Any]:
    """The `config` of the K8sRunLauncher in the instance the chart renders."""
    launcher = vals["runLauncher"]["config"]["k8sRunLauncher"]
    config: dict[str, Any] = {
        "load_incluster_config": launcher["loadInclusterConfig"],
        "job_namespace": launcher.get("jobNamespace") or NAMESPACE,
        "image_pull_policy": launcher["imagePullPolicy"],
        "service_account_name": main_service_account(vals),
        "dagster_home": vals.get("global", {}).get("dagsterHome", DAGSTER_HOME),
        "instance_config_map": f"{fullname('dagster')}-instance",
        "postgres_password_secret": vals["global"]["postgresqlSecretName"],
    }
    if vals.get("imagePullSecrets"):
        config["image_pull_secrets"] = vals["imagePullSecrets"]
    if "image" in launcher:
        config["job_image"] = image_name(launcher["image"])
    if launcher.get("envConfigMaps"):
        config["env_config_maps"] = _names(launcher["envConfigMaps"])
    if launcher.get("envSecrets"):
        config["env_secrets"] = _names(launcher["envSecrets"])
    config |= {field: copy.deepcopy(launcher[key]) for key, field in _OPTIONAL.items() if launcher.get(key)}
    if launcher.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if launcher.get("runK8sConfig"):
        run = launcher["runK8sConfig"]
        config["run_k8s_config"] = {
            field: copy.deepcopy(run[key]) for key, field in RUN_K8S_CONFIG.items() if key in run
        }
    return config


class _Recorder:
    """Stands in for the Kubernetes batch API and the Dagster instance the run launcher reports to."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Any, str]] = []

    def create_namespaced_job(self, body: Any, namespace: str, **_: Any) -> None:
        self.jobs.append((body, namespace))

    def add_run_tags(self, *_: Any) -> None:
        pass

    def report_engine_event(self, *_: Any, **__: Any) -> None:
        pass


def run_job(vals: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run Job (Kubernetes JSON) the chart's K8sRunLauncher creates for a run of the user deployment."""
    import kubernetes
    from dagster._config import process_config
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster_k8s import K8sRunLauncher

    vals = vals or values()
    (deployment,) = vals[SUBCHART]["deployments"]
    processed = process_config(K8sRunLauncher.config_type(), run_launcher_config(vals))
    assert processed.success, [e.message for e in processed.errors]
    recorder = _Recorder()
    with mock.patch("dagster_k8s.launcher.load_kubernetes_config"):
        launcher = K8sRunLauncher(**processed.value, k8s_client_batch_api=recorder)
    launcher._instance_weakref = weakref.ref(recorder)
    origin = RepositoryPythonOrigin(
        executable_path="/opt/venv/bin/python",
        code_pointer=ModuleCodePointer(deployment["codeServerArgs"][1], "defs", None),
        container_image=image_name(deployment["image"]),  # DAGSTER_CURRENT_IMAGE, which the chart always sets
        container_context=user_code_container_context(vals, deployment),
    )
    run = DagsterRun(
        job_name="train_checkpoint", run_id="0" * 32, job_code_origin=JobPythonOrigin("train_checkpoint", origin)
    )
    launcher._launch_k8s_job_with_args("dagster-run-0", ["dagster", "api", "execute_run"], run)
    ((job, namespace),) = recorder.jobs
    body = kubernetes.client.ApiClient().sanitize_for_serialization(job)
    return {"apiVersion": "batch/v1", "kind": "Job", **body, "metadata": {**body["metadata"], "namespace": namespace}}


def run_pod_spec(vals: dict[str, Any] | None = None) -> dict[str, Any]:
    return run_job(vals)["spec"]["template"]["spec"]
