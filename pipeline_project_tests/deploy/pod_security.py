"""The `restricted` Pod Security Standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
baseline included) as a check of one pod spec, and every pod spec the deploy files make, as rendered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from pipeline_project_tests.deploy.helpers import K8S, k8s_manifests

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
RESTRICTED_SECCOMP = {"RuntimeDefault", "Localhost"}
ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def _baseline(spec: dict[str, Any]) -> list[str]:
    found = [f"spec.{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for container in _containers(spec):
        name, context = container.get("name", "?"), container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name}: hostPort")
    return found


def _restricted_container(container: dict[str, Any], pod: dict[str, Any]) -> list[str]:
    name, context = container.get("name", "?"), container.get("securityContext") or {}
    found = []
    if context.get("allowPrivilegeEscalation") is not False:
        found.append(f"{name}: allowPrivilegeEscalation is not false")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in capabilities.get("drop", []):
        found.append(f"{name}: capabilities do not drop ALL")
    added = set(capabilities.get("add", [])) - ADDABLE_CAPABILITIES
    if added:
        found.append(f"{name}: adds capabilities {sorted(added)}")
    if not context.get("runAsNonRoot", pod.get("runAsNonRoot")):
        found.append(f"{name}: runAsNonRoot is not true")
    if context.get("runAsUser", pod.get("runAsUser")) == 0:
        found.append(f"{name}: runs as uid 0")
    seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
    if seccomp not in RESTRICTED_SECCOMP:
        found.append(f"{name}: seccompProfile is {seccomp or 'unset'}")
    return found


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in the pod spec `spec` the `restricted` level forbids ([] when it passes)."""
    found = _baseline(spec)
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    pod = spec.get("securityContext") or {}
    for container in _containers(spec):
        found += _restricted_container(container, pod)
    return found


def workloads(folder: str) -> dict[str, Callable[[], dict[str, Any]]]:
    """The pod template of each Deployment / StatefulSet in deploy/k8s/<folder>."""
    pods = {}
    for path, doc in k8s_manifests(folder):
        if doc["kind"] in ("Deployment", "StatefulSet"):
            spec = doc["spec"]["template"]["spec"]
            pods[f"{folder}/{path.name}: {doc['kind']} {doc['metadata']['name']}"] = lambda spec=spec: spec
    return pods


def _chart_pod(component: dict[str, Any], volumes: list[dict[str, Any]], init: tuple[str, ...]) -> dict[str, Any]:
    """A chart pod as its template lays it out: the component's pod and container security contexts, the latter on
    its init containers too (helm/dagster/templates/deployment-*.yaml, dagster-user-deployments' deployment)."""
    container = component.get("securityContext") or {}
    return {
        "securityContext": component.get("podSecurityContext") or {},
        "initContainers": [{"name": name, "securityContext": container} for name in init],
        "containers": [{"name": "dagster", "securityContext": container}],
        "volumes": volumes,
    }


def chart_pods() -> dict[str, Callable[[], dict[str, Any]]]:
    values = yaml.safe_load((K8S / "dagster" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    instance = [{"name": "dagster-instance", "configMap": {"name": "dagster-instance"}}]
    checks = ("check-db-ready", f"init-user-deployment-{deployment['name']}")
    return {
        "Helm: webserver": lambda: _chart_pod(values["dagsterWebserver"], instance, checks),
        "Helm: daemon": lambda: _chart_pod(values["dagsterDaemon"], instance, checks),
        "Helm: code server": lambda: _chart_pod(deployment, deployment.get("volumes", []), ()),
    }


def _strimzi_pod(pod: dict[str, Any], containers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "securityContext": pod.get("securityContext") or {},
        "containers": [{"name": n, "securityContext": c.get("securityContext") or {}} for n, c in containers.items()],
    }


def strimzi_pods(folder: str) -> dict[str, Callable[[], dict[str, Any]]]:
    """The pod templates of the Strimzi resources in deploy/k8s/<folder>: the operator makes the pods from them."""
    pods = {}
    for _path, doc in k8s_manifests(folder):
        spec, where = doc["spec"], f"{folder}: {doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] == "KafkaNodePool":
            t = spec.get("template", {})
            containers = {"kafka": t.get("kafkaContainer", {}), "init": t.get("initContainer", {})}
            pods[where] = lambda t=t, c=containers: _strimzi_pod(t.get("pod", {}), c)
        elif doc["kind"] == "Kafka":
            e, x = spec["entityOperator"].get("template", {}), spec["kafkaExporter"].get("template", {})
            operators = {
                "topic-operator": e.get("topicOperatorContainer", {}),
                "user-operator": e.get("userOperatorContainer", {}),
            }
            pods[f"{where} entity operator"] = lambda e=e, c=operators: _strimzi_pod(e.get("pod", {}), c)
            exporter = {"kafka-exporter": x.get("container", {})}
            pods[f"{where} kafka exporter"] = lambda x=x, c=exporter: _strimzi_pod(x.get("pod", {}), c)
    return pods
