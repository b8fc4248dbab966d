"""Every trainer pod the cluster runs, checked as rendered: the pod PipesK8sClient creates from the cluster's
`PIPELINE_TRAINER_LAUNCH` (dagster-k8s's own `build_pod_body`) and each node's pod of the committed JobSet.
Both carry CPU and memory requests equal to their limits, `/dev/shm` of the configured size, a GPU node selector
and toleration, NCCL's interface, the autoscalers' do-not-disrupt annotations; a Pipes-launched one is owned by
the run pod that launched it."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from pipeline_project.defs.resources import launchers
from pipeline_project.defs.resources.launchers import owner as pod_owner
from pipeline_project_tests.deploy import pod_env
from pipeline_project_tests.deploy.helpers import K8S, validate_k8s, yaml_docs
from pipeline_project_tests.deploy.test_trainer_job_env import _job


def _pipes_pod() -> dict:
    return launchers.render_k8s_pod(pod_env.trainer_launch(), _job())


def _jobset_pod() -> dict:
    (doc,) = yaml_docs(K8S / "training" / "jobset.yaml")
    (replicated,) = doc["spec"]["replicatedJobs"]
    return replicated["template"]["spec"]["template"]


PODS = {"Pipes trainer pod": _pipes_pod, "JobSet node pod": _jobset_pod}


def _container(pod: dict) -> dict:
    (container,) = pod["spec"]["containers"]
    return container


@pytest.mark.parametrize("pod", list(PODS))
def test_requests_equal_limits_so_the_pod_is_guaranteed(pod):
    launch = pod_env.trainer_launch()
    resources = _container(PODS[pod]())["resources"]
    assert resources["requests"] == {"cpu": launch.cpu, "memory": launch.memory}
    assert resources["limits"] == {"nvidia.com/gpu": str(launch.gpus_per_pod), **resources["requests"]}


@pytest.mark.parametrize("pod", list(PODS))
def test_shm_is_sized_by_the_launch(pod):
    spec = PODS[pod]()["spec"]
    (mount,) = [m for m in _container({"spec": spec})["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": pod_env.trainer_launch().shm_size}


@pytest.mark.parametrize("pod", list(PODS))
def test_the_pod_lands_on_gpu_nodes(pod):
    spec = PODS[pod]()["spec"]
    assert spec["nodeSelector"] == launchers.GPU_NODE_SELECTOR
    assert launchers.GPU_TOLERATION in spec["tolerations"]


@pytest.mark.parametrize("pod", list(PODS))
def test_nccl_talks_on_the_interface_the_deployment_names(pod):
    env = {e["name"]: e.get("value") for e in _container(PODS[pod]())["env"]}
    interface = pod_env.trainer_launch().network_interface
    assert interface and env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == interface


@pytest.mark.parametrize("pod", list(PODS))
def test_autoscalers_leave_the_node_of_a_trainer_alone(pod):
    annotations = PODS[pod]()["metadata"]["annotations"]
    assert annotations["karpenter.sh/do-not-disrupt"] == "true"
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"


def test_each_node_of_the_jobset_is_the_pod_dagster_launches():
    """The JobSet's pod differs from the Pipes pod only in how a hand-started multi-node job needs it to."""
    pipes, node = _pipes_pod(), _jobset_pod()
    assert node["metadata"]["annotations"] == pipes["metadata"]["annotations"]
    pipes_spec, node_spec = copy.deepcopy(pipes["spec"]), copy.deepcopy(node["spec"])
    del pipes_spec["activeDeadlineSeconds"]  # the JobSet runs as long as its operator lets it
    pipes_container, node_container = pipes_spec.pop("containers")[0], node_spec.pop("containers")[0]
    assert node_spec == pipes_spec
    for key in ("command", "env", "ports"):  # torchrun's rendezvous, the job from a ConfigMap, the rdzv port
        pipes_container.pop(key), node_container.pop(key)
    assert node_container == pipes_container


def test_rdma_devices_are_requested_and_limited_alike():
    launch = pod_env.trainer_launch().model_copy(
        update={"network_resources": {"vpc.amazonaws.com/efa": "32"}, "env": {"FI_PROVIDER": "efa"}}
    )
    pod = launchers.render_k8s_pod(launch, _job())
    validate_k8s(pod)
    resources = _container(pod)["resources"]
    assert resources["requests"]["vpc.amazonaws.com/efa"] == resources["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert {"name": "FI_PROVIDER", "value": "efa"} in _container(pod)["env"]


def test_a_pod_without_cpu_or_memory_is_refused():
    launch = pod_env.trainer_launch()
    for missing in ("cpu", "memory"):
        with pytest.raises(ValueError, match="BestEffort"):
            launchers.k8s_pod_spec(launch.model_copy(update={missing: None}))


def test_a_gpu_pod_without_a_node_selector_gets_the_gpu_one():
    launch = pod_env.trainer_launch().model_copy(update={"node_selector": {}})
    assert launchers.k8s_pod_spec(launch)["nodeSelector"] == launchers.GPU_NODE_SELECTOR
    assert "nodeSelector" not in launchers.k8s_pod_spec(launch.model_copy(update={"gpus_per_pod": 0}))


RUN_POD = SimpleNamespace(metadata=SimpleNamespace(name="dagster-run-0123-abcde", uid="5f1c-run-pod-uid"))


class _CoreApi:
    def __init__(self, fail: bool = False):
        self.fail, self.read = fail, []

    def read_namespaced_pod(self, name, namespace):
        self.read.append((name, namespace))
        if self.fail:
            raise RuntimeError("403 Forbidden")
        return RUN_POD


@pytest.fixture
def in_a_pod(monkeypatch, tmp_path):
    """This process as the run pod `dagster-run-0123-abcde` in namespace pipeline."""
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("pipeline\n")
    monkeypatch.setattr(pod_owner, "SERVICE_ACCOUNT_NAMESPACE", namespace_file)
    monkeypatch.setattr(pod_owner.socket, "gethostname", lambda: RUN_POD.metadata.name)


def test_the_run_pod_owns_its_trainer_pod(in_a_pod):
    api = _CoreApi()
    owner = launchers.run_pod_owner(None, core_api=api)
    assert api.read == [(RUN_POD.metadata.name, "pipeline")]
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": RUN_POD.metadata.name, "uid": RUN_POD.metadata.uid}
    pod = launchers.render_k8s_pod(pod_env.trainer_launch(), _job(), owner=owner)
    validate_k8s(pod)
    assert pod["metadata"]["ownerReferences"] == [owner]


def test_no_owner_in_another_namespace_or_outside_a_pod(in_a_pod, monkeypatch, tmp_path):
    assert launchers.run_pod_owner("training", core_api=_CoreApi()) is None  # Kubernetes would delete it at once
    monkeypatch.setattr(pod_owner, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    assert launchers.run_pod_owner(None, core_api=_CoreApi()) is None


def test_a_failed_owner_lookup_in_a_pod_fails_the_launch(in_a_pod):
    with pytest.raises(RuntimeError, match="cannot read the run pod"):
        launchers.run_pod_owner(None, core_api=_CoreApi(fail=True))


def test_the_launcher_creates_the_trainer_pod_owned_by_the_run_pod(in_a_pod, monkeypatch):
    import dagster_k8s
    import kubernetes

    from pipeline_project.training import backlog

    calls = []

    class _Client:
        def run(self, **kwargs):
            calls.append(kwargs)
            return "invocation"

    monkeypatch.setattr(backlog, "by_reference", lambda job, _s3, _run_id: job)
    monkeypatch.setattr(dagster_k8s, "PipesK8sClient", _Client)
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(kubernetes.client, "CoreV1Api", _CoreApi)
    context = SimpleNamespace(run=SimpleNamespace(run_id="r-1"), log=SimpleNamespace(info=lambda _m: None))
    assert launchers.launch_trainer(context, pod_env.trainer_launch(), _job(), nproc=1) == "invocation"
    (call,) = calls
    assert call["namespace"] == "pipeline"
    (reference,) = call["base_pod_meta"]["ownerReferences"]
    assert (reference["kind"], reference["name"], reference["uid"]) == ("Pod", *vars(RUN_POD.metadata).values())
