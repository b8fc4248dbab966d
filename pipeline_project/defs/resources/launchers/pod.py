"""The trainer pod (Kubernetes JSON field names): PipesK8sClient's `base_pod_spec` and `base_pod_meta`, and the
pod template of the multi-node JobSet.

Every trainer pod has CPU and memory requests equal to its limits (Guaranteed QoS), `/dev/shm` sized by the
launch, a GPU node selector and toleration, the do-not-disrupt annotations of Karpenter and cluster-autoscaler,
the inter-node network the launch names (NCCL's interface, RDMA devices), and passes the `restricted` Pod Security
Standard (non-root, RuntimeDefault seccomp, no privilege escalation, every capability dropped) unless the launch
asks for IPC_LOCK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline_project.defs.resources.launchers.commands import pod_command, trainer_env
from pipeline_project.defs.resources.launchers.config import (
    DO_NOT_DISRUPT,
    GPU_NODE_SELECTOR,
    SCRATCH_PATH,
    SHM_PATH,
    TRAINER_CONTAINER,
    TrainerLaunch,
)

if TYPE_CHECKING:
    from pipeline_project.training.job import JobConfig

TRAINER_LABELS = {"app.kubernetes.io/name": "pipeline-trainer"}


def _secret_ref(env_name: str, ref: str, optional: bool) -> dict[str, Any]:
    secret, sep, key = ref.partition("/")
    if not (secret and sep and key):
        raise ValueError(f"secret_env[{env_name!r}] = {ref!r}: expected '<secret name>/<key>'")
    return {"name": env_name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}}}


def _env(launch: TrainerLaunch) -> list[dict[str, Any]]:
    unknown = set(launch.optional_secrets) - set(launch.secret_env)
    if unknown:
        raise ValueError(f"optional_secrets names env vars that secret_env does not set: {sorted(unknown)}")
    env = [_secret_ref(name, ref, name in launch.optional_secrets) for name, ref in launch.secret_env.items()]
    network = (
        {"NCCL_SOCKET_IFNAME": launch.network_interface, "GLOO_SOCKET_IFNAME": launch.network_interface}
        if launch.network_interface
        else {}
    )
    plain = {**network, **launch.env, "TMPDIR": SCRATCH_PATH}
    return env + [{"name": k, "value": v} for k, v in plain.items()]


def _resources(launch: TrainerLaunch) -> dict[str, dict[str, str]]:
    if not (launch.cpu and launch.memory):
        raise ValueError(
            "TrainerLaunch.cpu and .memory are required for a pod: without requests it is BestEffort, the first "
            "pod a node under pressure evicts, and the scheduler places it without counting its needs"
        )
    both = {"cpu": launch.cpu, "memory": launch.memory, **launch.network_resources}
    gpus = {"nvidia.com/gpu": str(launch.gpus_per_pod)} if launch.gpus_per_pod > 0 else {}
    return {"limits": {**gpus, **both}, "requests": dict(both)}


def _volumes(launch: TrainerLaunch) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, the container's mounts): /dev/shm in memory, the scratch dir, the Secret volumes."""
    mounts = [{"name": "dshm", "mountPath": SHM_PATH}, {"name": "scratch", "mountPath": SCRATCH_PATH}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": launch.shm_size}},
        {"name": "scratch", "emptyDir": {"sizeLimit": launch.scratch_size}},
    ]
    for i, (secret, path) in enumerate(sorted(launch.secret_volumes.items())):
        mounts.append({"name": f"secret-{i}", "mountPath": path, "readOnly": True})
        volumes.append({"name": f"secret-{i}", "secret": {"secretName": secret}})
    return volumes, mounts


def pod_security_context(uid: int) -> dict[str, Any]:
    """The pod half of the `restricted` Pod Security Standard, for an image whose USER is the non-root `uid`."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(add: tuple[str, ...] = ()) -> dict[str, Any]:
    """The container half of the `restricted` Pod Security Standard (`add` leaves it, but for NET_BIND_SERVICE)."""
    capabilities: dict[str, list[str]] = {"drop": ["ALL"], **({"add": list(add)} if add else {})}
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


def k8s_pod_spec(launch: TrainerLaunch, command: list[str] | None = None) -> dict[str, Any]:
    """The trainer pod's spec (Kubernetes JSON field names), PipesK8sClient's `base_pod_spec`."""
    if not launch.image:
        raise ValueError("TrainerLaunch.image is required to run the trainer in a pod (launcher 'k8s')")
    volumes, mounts = _volumes(launch)
    container: dict[str, Any] = {
        "name": TRAINER_CONTAINER,
        "image": launch.image,
        "imagePullPolicy": launch.image_pull_policy,
        "command": command or pod_command(launch.gpus_per_pod),
        "env": _env(launch),
        "resources": _resources(launch),
        "volumeMounts": mounts,
        "securityContext": container_security_context(("IPC_LOCK",) if launch.ipc_lock else ()),
    }
    if launch.env_config_maps:
        container["envFrom"] = [{"configMapRef": {"name": name}} for name in launch.env_config_maps]
    if launch.metrics_port:
        ranks = range(max(1, launch.gpus_per_pod))
        container["ports"] = [{"name": f"metrics-r{i}", "containerPort": launch.metrics_port + i} for i in ranks]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(launch.pod_wait_timeout_s),
        "securityContext": pod_security_context(launch.run_as_user),
        "containers": [container],
        "volumes": volumes,
    }
    if launch.service_account:
        spec["serviceAccountName"] = launch.service_account
    node_selector = launch.node_selector or (GPU_NODE_SELECTOR if launch.gpus_per_pod > 0 else {})
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if launch.tolerations:
        spec["tolerations"] = [dict(t) for t in launch.tolerations]
    return spec


def k8s_pod_meta(launch: TrainerLaunch, owner: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod's labels and annotations; `owner` (an ownerReference, `owner.run_pod_owner`) makes the pod a
    dependent of the run pod that launched it, so Kubernetes deletes it when that pod is gone."""
    meta: dict[str, Any] = {
        "labels": {**TRAINER_LABELS, **launch.labels},
        "annotations": {**DO_NOT_DISRUPT, **launch.annotations},
    }
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def render_k8s_pod(
    launch: TrainerLaunch, job: JobConfig, pod_name: str = "trainer", owner: dict[str, str] | None = None
) -> dict[str, Any]:
    """The Pod that PipesK8sClient would create (its own `build_pod_body`), as Kubernetes JSON, without pipes'
    bootstrap variables: for tests and for a look before launching."""
    import kubernetes
    from dagster_k8s.pipes import build_pod_body

    pod = build_pod_body(
        pod_name=pod_name,
        image=None,
        command=None,
        env_vars=trainer_env(job),
        base_pod_meta=k8s_pod_meta(launch, owner),
        base_pod_spec=k8s_pod_spec(launch),
    )
    return {"apiVersion": "v1", "kind": "Pod", **kubernetes.client.ApiClient().sanitize_for_serialization(pod)}
