"""The run pods the Helm values make: rendered the way the chart's templates do and launched by the installed
dagster-k8s's own K8sRunLauncher (helm_render.py), so its merge of the code server's container context after the
run launcher's config decides what a run pod gets, as it does on a cluster."""

from __future__ import annotations

import copy

from pipeline_project_tests.deploy import helm_render
from pipeline_project_tests.deploy.helpers import validate_k8s

RUN_SERVICE_ACCOUNT = "pipeline-run"  # may launch the trainer pod (deploy/k8s/base/rbac.yaml)
MAX_FINISHED_JOB_TTL_S = 600


def _intended() -> dict:
    return helm_render.values()["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]


def _container(spec: dict) -> dict:
    (container,) = spec["containers"]
    return container


def test_run_pods_get_the_resources_and_service_account_the_values_intend():
    job = helm_render.run_job()
    validate_k8s(job)
    spec = job["spec"]["template"]["spec"]
    assert _container(spec)["resources"] == _intended()["containerConfig"]["resources"]
    assert _container(spec)["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}
    assert _container(spec)["resources"]["limits"] == {"memory": "16Gi"}
    assert spec["serviceAccountName"] == _intended()["podSpecConfig"]["serviceAccountName"] == RUN_SERVICE_ACCOUNT


def test_the_code_servers_context_would_win_over_the_run_launchers():
    """Why includeConfigInLaunchedRuns is off: the chart's container context carries the code server's resources
    and service account, and dagster-k8s merges it after the run launcher's config."""
    values = copy.deepcopy(helm_render.values())
    (deployment,) = values[helm_render.SUBCHART]["deployments"]
    deployment["includeConfigInLaunchedRuns"] = {"enabled": True}
    spec = helm_render.run_pod_spec(values)
    assert _container(spec)["resources"] == deployment["resources"]
    assert spec["serviceAccountName"] == helm_render.user_code_service_account(values) != RUN_SERVICE_ACCOUNT


def test_run_pods_get_the_settings_secrets_and_volumes_of_the_code_server():
    (deployment,) = helm_render.values()[helm_render.SUBCHART]["deployments"]
    spec = helm_render.run_pod_spec()
    container = _container(spec)
    env_from = container["envFrom"]
    for config_map in deployment["envConfigMaps"]:
        assert {"configMapRef": config_map} in env_from
    for secret in deployment["envSecrets"]:  # `optional` kept: with IRSA there is no Secret pipeline-aws
        assert {"secretRef": secret} in env_from, secret
    assert {e["name"] for e in deployment["env"]} <= {e["name"] for e in container["env"]}
    assert all(m in container["volumeMounts"] for m in deployment["volumeMounts"])
    assert all(v in spec["volumes"] for v in deployment["volumes"])
    assert container["image"] == helm_render.image_name(deployment["image"])


def test_a_finished_run_job_goes_soon_and_takes_its_trainer_pod_with_it():
    """A trainer pod is owned by its run pod (launchers/owner.py): deleting the finished run Job deletes the run pod,
    and the garbage collector the trainer pod of a run pod that died (OOM-killed, evicted) and still stands."""
    job = helm_render.run_job()
    assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= MAX_FINISHED_JOB_TTL_S
    assert job["spec"]["activeDeadlineSeconds"] == _intended()["jobSpecConfig"]["activeDeadlineSeconds"]
