"""Every pod the deploy files make passes the `restricted` Pod Security Standard (non-root, RuntimeDefault seccomp,
no privilege escalation, every capability dropped, only the volume types it allows), checked on each pod spec
as rendered: the manifests of deploy/k8s, the JobSet, the trainer pod PipesK8sClient creates, the run pod the
Helm chart and dagster-k8s make, the chart's own pods from the values, and the Strimzi pod templates. The images
run as the non-root uid the pods name."""

from __future__ import annotations

import re

import pytest

from pipeline_project.defs.resources import launchers
from pipeline_project_tests.deploy import helm_render, pod_env
from pipeline_project_tests.deploy.helpers import IMAGES, K8S, yaml_docs
from pipeline_project_tests.deploy.pod_security import chart_pods, restricted_violations, strimzi_pods, workloads
from pipeline_project_tests.deploy.test_trainer_job_env import _job


def _jobset_pod() -> dict:
    (doc,) = yaml_docs(K8S / "training" / "jobset.yaml")
    (replicated,) = doc["spec"]["replicatedJobs"]
    return replicated["template"]["spec"]["template"]["spec"]


def _rdma_trainer_pod() -> dict:
    launch = pod_env.trainer_launch().model_copy(update={"ipc_lock": True})
    return launchers.render_k8s_pod(launch, _job())["spec"]


PODS = {
    **workloads("base"),
    **workloads("monitoring"),
    "training/jobset.yaml: JobSet node pod": _jobset_pod,
    "trainer pod (PipesK8sClient, cluster launch)": lambda: launchers.render_k8s_pod(pod_env.trainer_launch(), _job())[
        "spec"
    ],
    "run pod (Helm, K8sRunLauncher)": helm_render.run_pod_spec,
    **chart_pods(),
    **strimzi_pods("kafka"),
    **strimzi_pods("kafka/tiered"),
    "trainer pod with ipc_lock (RDMA)": _rdma_trainer_pod,
}
# Pods that cannot be `restricted`, and why. Each must still fail the check (an entry that passes is stale).
ALLOWED = {
    "trainer pod with ipc_lock (RDMA)": "RDMA memory registration needs IPC_LOCK where the container runtime's "
    "memlock limit is not unlimited; a deployment turns it on (TrainerLaunch.ipc_lock) only then, in a namespace "
    "that admits the privileged level",
}


def test_every_deploy_file_with_pods_is_covered():
    names = " ".join(PODS)
    for folder in ("base", "monitoring"):
        for path in sorted((K8S / folder).glob("*.yaml")):
            if any(doc["kind"] in ("Deployment", "StatefulSet") for doc in yaml_docs(path)):
                assert path.name in names, path


@pytest.mark.parametrize("pod", list(PODS))
def test_each_pod_passes_the_restricted_pod_security_standard(pod):
    found = restricted_violations(PODS[pod]())
    if pod in ALLOWED:
        assert found, f"{pod} passes now: drop it from ALLOWED"
    else:
        assert found == [], f"{pod}: {found}"


def test_the_rdma_trainer_leaves_restricted_only_by_its_capability():
    assert restricted_violations(_rdma_trainer_pod()) == ["trainer: adds capabilities ['IPC_LOCK']"]


def test_the_checker_sees_each_broken_rule():
    spec = {
        "hostNetwork": True,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "ok", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
            {"name": "bad", "securityContext": {"runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}},
        ],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
    }
    found = restricted_violations(spec)
    assert found == [
        "spec.hostNetwork",
        "volume host: ['hostPath']",
        "bad: allowPrivilegeEscalation is not false",
        "bad: capabilities do not drop ALL",
        "bad: adds capabilities ['SYS_ADMIN']",
        "bad: runs as uid 0",
    ]
    assert restricted_violations({"containers": [{"name": "c"}]})[-2:] == [
        "c: runAsNonRoot is not true",
        "c: seccompProfile is unset",
    ]


@pytest.mark.parametrize("dockerfile", ["user-code.Dockerfile", "trainer.Dockerfile"])
def test_the_images_run_as_the_uid_the_pods_name(dockerfile):
    users = re.findall(r"^USER (\S+)$", (IMAGES / dockerfile).read_text(), flags=re.M)
    assert users and users[-1] == str(launchers.pod_security_context(10001)["runAsUser"]) != "0"
    assert pod_env.trainer_launch().run_as_user == int(users[-1])
