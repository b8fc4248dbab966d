"""Every deployment makes the corpus the validated local stack makes: the settings the stack's Dagster gets on top of
its clients' (`settings.stack_corpus_env`: FIM for code, the cleaning config file with HumanEval decontamination)
have the same values on the cluster and in compose, and the cleaning config file each names holds the same
config as deploy/local/cleaning-deepseek.json, mounted where the setting points in every pod that cleans.
A setting that differs on purpose is listed in DIFFERS with the reason."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest
import yaml

from pipeline_project.cleaning import CleaningConfig
from pipeline_project.settings import stack_corpus_env
from pipeline_project_tests.deploy import helm_render, pod_env
from pipeline_project_tests.deploy.helpers import COMPOSE, DEPLOY, k8s_manifests

LOCAL_CLEANING = DEPLOY / "local" / "cleaning-deepseek.json"
CLEANING_ENV = "PIPELINE_CLEANING_CONFIG"
# (deployment, variable) -> why it differs from the local stack on purpose
DIFFERS: dict[tuple[str, str], str] = {}


@pytest.fixture
def local(monkeypatch) -> dict[str, str]:
    """What the local stack's Dagster runs with, whatever this shell exports."""
    for name in stack_corpus_env(LOCAL_CLEANING):
        monkeypatch.delenv(name, raising=False)
    return stack_corpus_env(LOCAL_CLEANING)


def _compose_env() -> dict[str, str]:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]["user-code"]["environment"]


def _compose_file(path: str) -> dict:
    """The JSON compose mounts at `path` in the user-code service."""
    services = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["services"]
    for volume in services["user-code"]["volumes"]:
        source, target = volume.split(":")[:2]
        if target == path:
            return json.loads((COMPOSE / source).read_text())
    raise AssertionError(f"compose mounts nothing at {path}")


def _config_map_file(pod: dict, path: str) -> dict:
    """The JSON a pod spec has at `path`: the ConfigMap volume mounted at its folder, the key of its name."""
    (container,) = pod["containers"]
    folder, key = str(PurePosixPath(path).parent), PurePosixPath(path).name
    (mount,) = [m for m in container.get("volumeMounts", []) if m["mountPath"] == folder]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    (config_map,) = [
        doc
        for _, doc in k8s_manifests("base")
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == volume["configMap"]["name"]
    ]
    return json.loads(config_map["data"][key])


def _cluster_pods() -> dict[str, dict]:
    (deployment,) = helm_render.values()[helm_render.SUBCHART]["deployments"]
    code_server = {"containers": [{"volumeMounts": deployment["volumeMounts"]}], "volumes": deployment["volumes"]}
    return {"run pod": helm_render.run_pod_spec(), "code server": code_server}


DEPLOYMENTS = {"cluster": pod_env.settings_data, "compose": _compose_env}


@pytest.mark.parametrize("deployment", list(DEPLOYMENTS))
def test_each_deployment_sets_the_corpus_settings_of_the_local_stack(deployment, local):
    env = DEPLOYMENTS[deployment]()
    for name, value in local.items():
        if (deployment, name) in DIFFERS:
            continue
        assert name in env, f"{deployment} leaves {name} unset; the local stack runs with {value}"
        if name == CLEANING_ENV:
            continue  # a path of its own: its content is compared below
        assert float(env[name]) == float(value), f"{deployment}: {name}={env[name]}, the local stack's {value}"


def test_the_cluster_cleans_with_the_local_stacks_cleaning_config():
    path = pod_env.settings_data()[CLEANING_ENV]
    expected = json.loads(LOCAL_CLEANING.read_text())
    for pod, spec in _cluster_pods().items():
        assert _config_map_file(spec, path) == expected, pod
    assert CleaningConfig.model_validate(expected).decontamination.enabled


def test_compose_cleans_with_the_local_stacks_cleaning_config():
    assert _compose_file(_compose_env()[CLEANING_ENV]) == json.loads(LOCAL_CLEANING.read_text())


def test_every_entry_of_differs_names_a_corpus_setting(local):
    assert {name for _, name in DIFFERS} <= set(local)
