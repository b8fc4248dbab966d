"""The Dagster instance of each deployment, against Dagster's own instance schema (dagster 1.13 in .venv):
deploy/dagster/dagster.yaml (compose, and any $DAGSTER_HOME) and the instance the Helm chart renders from
deploy/k8s/dagster/values.yaml. Each keeps step logs in S3 and bounds how long a run may hold its slot."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config_schema

from pipeline_project_tests.deploy import pod_env
from pipeline_project_tests.deploy.helpers import COMPOSE, DEPLOY, K8S, validate_k8s

# The chart's templates (helm/dagster/templates/configmap-instance.yaml and helpers/instance/_compute-log-manager.tpl,
# 1.13 line) map these values keys, and only these, to instance keys; any other key is dropped without a word.
CHART_RUN_MONITORING = {
    "enabled": "enabled",
    "startTimeoutSeconds": "start_timeout_seconds",
    "cancelTimeoutSeconds": "cancel_timeout_seconds",
    "maxResumeRunAttempts": "max_resume_run_attempts",
    "pollIntervalSeconds": "poll_interval_seconds",
    "freeSlotsAfterRunEndSeconds": "free_slots_after_run_end_seconds",
}
CHART_RUN_RETRIES = {"enabled": "enabled", "maxRetries": "max_retries"}
CHART_S3_COMPUTE_LOGS = {
    "bucket": "bucket",
    "localDir": "local_dir",
    "prefix": "prefix",
    "useSsl": "use_ssl",
    "verify": "verify",
    "verifyCertPath": "verify_cert_path",
    "endpointUrl": "endpoint_url",
    "skipEmptyFiles": "skip_empty_files",
    "uploadInterval": "upload_interval",
    "uploadExtraArgs": "upload_extra_args",
    "showUrlOnly": "show_url_only",
    "region": "region",
}
MAX_RUNTIME_CEILING_S = 2 * 86400  # a dead run never holds the training slot for more than two days


def _validate_instance(config: dict[str, Any]) -> None:
    result = validate_config(dagster_instance_config_schema(), config)
    assert result.success, [e.message for e in result.errors]
    for key in ("compute_logs", "run_launcher", "run_coordinator"):
        if key in config and "config" in config[key]:  # a configurable class: its own schema
            cls = getattr(importlib.import_module(config[key]["module"]), config[key]["class"])
            result = validate_config(cls.config_type(), config[key]["config"])
            assert result.success, (key, [e.message for e in result.errors])


def _chart_map(values: dict[str, Any], mapping: dict[str, str], where: str) -> dict[str, Any]:
    unknown = set(values) - set(mapping)
    assert not unknown, f"{where}: the chart never reads {sorted(unknown)}"
    return {mapping[k]: v for k, v in values.items()}


def _helm_values() -> dict[str, Any]:
    return yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())


def helm_instance() -> dict[str, Any]:
    """The instance pieces the chart renders from our values (run monitoring, retries, step logs)."""
    values = _helm_values()
    daemon = values["dagsterDaemon"]
    clm = values["computeLogManager"]
    assert clm["type"] == "S3ComputeLogManager"
    return {
        "run_monitoring": _chart_map(daemon["runMonitoring"], CHART_RUN_MONITORING, "dagsterDaemon.runMonitoring"),
        "run_retries": _chart_map(daemon["runRetries"], CHART_RUN_RETRIES, "dagsterDaemon.runRetries"),
        "compute_logs": {
            "module": "dagster_aws.s3.compute_log_manager",
            "class": "S3ComputeLogManager",
            "config": _chart_map(clm["config"]["s3ComputeLogManager"], CHART_S3_COMPUTE_LOGS, "computeLogManager"),
        },
    }


def _instance() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "dagster" / "dagster.yaml").read_text())


def test_deploy_dagster_yaml_fits_dagsters_instance_schema():
    _validate_instance(_instance())


def test_the_instance_the_chart_renders_fits_dagsters_instance_schema():
    _validate_instance(helm_instance())


def test_the_schema_check_rejects_a_misspelt_key():
    config = _instance()
    config["run_monitoring"]["max_runtme_seconds"] = 60
    with pytest.raises(AssertionError):
        _validate_instance(config)
    config = _instance()
    config["compute_logs"]["config"]["endpoint"] = "http://s3"
    with pytest.raises(AssertionError):
        _validate_instance(config)
    values = _helm_values()["dagsterDaemon"]["runMonitoring"] | {"maxRuntimeSeconds": 60}
    with pytest.raises(AssertionError, match="never reads"):
        _chart_map(values, CHART_RUN_MONITORING, "runMonitoring")


@pytest.mark.parametrize("instance", [_instance, helm_instance], ids=["dagster.yaml", "helm"])
def test_step_logs_go_to_s3(instance):
    logs = instance()["compute_logs"]
    assert (logs["module"], logs["class"]) == ("dagster_aws.s3.compute_log_manager", "S3ComputeLogManager")
    assert logs["config"]["bucket"] in ({"env": "PIPELINE_S3_BUCKET"}, pod_env.settings_data()["PIPELINE_S3_BUCKET"])


def _env_sources(node: Any) -> set[str]:
    if isinstance(node, dict):
        if set(node) == {"env"}:
            return {node["env"]}
        return {name for value in node.values() for name in _env_sources(value)}
    if isinstance(node, list):
        return {name for value in node for name in _env_sources(value)}
    return set()


@pytest.mark.parametrize("service", ["user-code", "dagster-daemon", "dagster-webserver"])
def test_compose_sets_every_variable_the_instance_reads(service):
    services = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]
    assert "../dagster/dagster.yaml:/opt/dagster/dagster_home/dagster.yaml:ro" in services[service]["volumes"]
    missing = _env_sources(_instance()) - pod_env.compose_env(service)
    assert not missing, f"compose service {service} lacks {sorted(missing)}"


def test_compose_runs_are_monitored_and_bounded_in_time():
    monitoring = _instance()["run_monitoring"]
    assert monitoring["enabled"] is True
    assert 0 < monitoring["max_runtime_seconds"] <= MAX_RUNTIME_CEILING_S
    assert 0 < monitoring["start_timeout_seconds"] <= 900


def test_cluster_runs_and_trainer_pods_are_bounded_in_time():
    values = _helm_values()
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
    job_spec = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["jobSpecConfig"]
    pod = {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}
    validate_k8s({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run"},
                  "spec": {**job_spec, "template": {"spec": pod}}})  # fmt: skip
    run_deadline = job_spec["activeDeadlineSeconds"]
    assert run_deadline == _instance()["run_monitoring"]["max_runtime_seconds"] <= MAX_RUNTIME_CEILING_S
    launch = pod_env.trainer_launch()
    # the trainer pod dies and its step fails before the run pod is killed, so the run ends with the reason
    assert 3600 <= launch.pod_wait_timeout_s < run_deadline
    from pipeline_project.defs.resources.launchers import k8s_pod_spec

    assert k8s_pod_spec(launch)["activeDeadlineSeconds"] == int(launch.pod_wait_timeout_s)
