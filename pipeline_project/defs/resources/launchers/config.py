"""`TrainerLaunch`: where and how the trainer runs, the deployment's choice (`PIPELINE_TRAINER_LAUNCH`)."""

from __future__ import annotations

from typing import Literal

import dagster as dg
from pydantic import Field

from pipeline_project.settings import AWS_ACCESS_KEY_ENV, AWS_SECRET_KEY_ENV, KAFKA_SASL_PASSWORD_ENV

JOB_CONFIG_ENV = "PIPELINE_TRAINER_JOB"
"""The environment variable that carries the `JobConfig` JSON (the entry point's `--config-env`)."""
ENTRYPOINT = "pipeline_project.training.entrypoint"
TRAINER_CONTAINER = "trainer"
MLFLOW_TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"  # read by the mlflow client itself, when the server wants a token
SHM_PATH = "/dev/shm"
SCRATCH_PATH = "/scratch"
RDZV_PORT = 29400
JOB_CONFIG_KEY = "job.json"  # the key of the job ConfigMap of the multi-node recipe
IMAGE_UID = 10001  # the USER of deploy/images/*.Dockerfile

# The Secrets of deploy/k8s: `pipeline-aws` and `pipeline-mlflow` are created by hand (deploy/README.md), `pipeline`
# is written by Strimzi's User Operator for KafkaUser `pipeline` (its SCRAM-SHA-512 password under key `password`).
DEFAULT_SECRET_ENV = {
    AWS_ACCESS_KEY_ENV: "pipeline-aws/AWS_ACCESS_KEY_ID",
    AWS_SECRET_KEY_ENV: "pipeline-aws/AWS_SECRET_ACCESS_KEY",
    KAFKA_SASL_PASSWORD_ENV: "pipeline/password",
    MLFLOW_TOKEN_ENV: "pipeline-mlflow/MLFLOW_TRACKING_TOKEN",
}
# Absent is fine for these: S3 through IRSA / workload identity, MLflow without authentication.
DEFAULT_OPTIONAL_SECRETS = [AWS_ACCESS_KEY_ENV, AWS_SECRET_KEY_ENV, MLFLOW_TOKEN_ENV]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The label NVIDIA's GPU feature discovery (GPU operator) puts on every GPU node: a GPU pod's node selector unless
# the launch names its own.
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
# Autoscalers that consolidate nodes (Karpenter) or scale them down (cluster-autoscaler) leave a node with such a
# pod alone: evicting one trainer pod stops every rank of the run.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


class TrainerLaunch(dg.Config):
    """Where and how the trainer runs. Only `launcher` matters for `subprocess`; the rest shapes the pod."""

    launcher: Literal["subprocess", "k8s"] = "subprocess"
    image: str | None = None
    """The trainer (CUDA) image; required for `k8s`."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    namespace: str | None = None
    """None: the namespace of the run pod (PipesK8sClient detects it)."""
    service_account: str | None = None
    gpus_per_pod: int = 1
    """`nvidia.com/gpu` limit and torchrun's --nproc-per-node; 0 = a CPU pod with one process."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Empty: GPU_NODE_SELECTOR for a pod with GPUs, none for a CPU pod."""
    tolerations: list[dict[str, str]] = Field(default_factory=lambda: [dict(GPU_TOLERATION)])
    shm_size: str = "16Gi"
    """sizeLimit of the memory-backed /dev/shm (NCCL and the loader's pinned buffers live there)."""
    scratch_size: str = "200Gi"
    """sizeLimit of the scratch emptyDir (TMPDIR): the downloaded and the new checkpoint."""
    cpu: str | None = None
    """CPU request and limit, required for a pod. Equal to each other, as the memory's are, so the pod is of the
    Guaranteed QoS class: evicted last under node pressure, and given whole cores by a static CPU manager."""
    memory: str | None = None
    """Memory request and limit, required for a pod; /dev/shm counts against it."""
    network_interface: str | None = None
    """The interface NCCL and gloo talk between nodes on (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME), e.g. `eth0`;
    None: NCCL's own choice."""
    network_resources: dict[str, str] = Field(default_factory=dict)
    """RDMA devices per pod, requested and limited alike, e.g. {"vpc.amazonaws.com/efa": "32"} (EFA on p5) or
    {"rdma/ib": "8"} (an RDMA device plugin); their NCCL variables (FI_PROVIDER, NCCL_IB_HCA, ...) go in `env`."""
    ipc_lock: bool = False
    """Adds the IPC_LOCK capability, which RDMA memory registration needs where the container runtime does not
    already give an unlimited memlock. Such a pod no longer passes the `restricted` Pod Security Standard."""
    secret_env: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SECRET_ENV))
    """Env var -> "<secret name>/<key>", set in the pod with a secretKeyRef."""
    optional_secrets: list[str] = Field(default_factory=lambda: list(DEFAULT_OPTIONAL_SECRETS))
    """Env vars of `secret_env` whose Secret may be missing (`optional: true`)."""
    secret_volumes: dict[str, str] = Field(default_factory=dict)
    """Secret name -> mount path, e.g. the Kafka cluster CA at the KAFKA_SSL_CA_LOCATION the run pod uses."""
    env: dict[str, str] = Field(default_factory=dict)
    """Plain (non-secret) env vars for the trainer, e.g. NCCL_DEBUG."""
    env_config_maps: list[str] = Field(default_factory=list)
    """ConfigMaps whose keys become the trainer's env (envFrom), e.g. the deployment's settings ConfigMap."""
    metrics_port: int = 0
    """PIPELINE_METRICS_PORT of the deployment: the pod declares port `metrics-r<i>` = metrics_port + i per local
    rank, for a PodMonitor to find (0: none)."""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    """On top of DO_NOT_DISRUPT."""
    run_as_user: int = IMAGE_UID
    """The non-root uid (and gid, fsGroup) the trainer runs as: the image's USER."""
    pod_wait_timeout_s: float = 86400.0
    """How long the run waits for the trainer pod; also the pod's activeDeadlineSeconds, so a hung trainer pod
    is killed, its step fails and the run's slot frees."""
    delete_pod_on_completion: bool = True

    @classmethod
    def from_json(cls, text: str | None) -> TrainerLaunch:
        """The launch a deployment configures: JSON of these fields (PIPELINE_TRAINER_LAUNCH); unset: subprocess."""
        return cls.model_validate_json(text) if text else cls()
