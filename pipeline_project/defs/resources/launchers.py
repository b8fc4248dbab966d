"""How the trainer process starts: a local subprocess or a GPU pod, both through dagster-pipes.

Which one is resource config (`TrainerLaunch.launcher`), never a branch in an asset. Both launchers start the
same entry point, `python -m pipeline_project.training.entrypoint --config-env PIPELINE_TRAINER_JOB`, with the
`JobConfig` JSON in that environment variable. No file is written on the run worker, so a pod on another node
reads its job exactly as a local subprocess does. The JSON carries no secret (`JobConfig` leaves the SASL password
out); in a pod, each secret is an env entry with a `secretKeyRef`: by reference, never by value.

- `subprocess`: `dagster.PipesSubprocessClient`. The trainer inherits the run worker's environment (secrets
  included), and `torchrun --standalone` starts one process per local GPU when there are several.
- `k8s`: `dagster_k8s.PipesK8sClient`, imported only when it is used, so the code location stays light. It
  launches one pod from `k8s_pod_spec`: `nvidia.com/gpu` limits, tolerations and node selector, `/dev/shm` as a
  memory-backed emptyDir, a scratch emptyDir as TMPDIR for checkpoints, secrets as env by reference, and
  `torchrun --nproc-per-node=<gpus_per_pod>`. Pipes messages come back through the pod's log.
- Several nodes: `jobset_manifest` renders the same pod as an Indexed Job in a JobSet, with `torchrun --nnodes`.
  The recipe is in deploy/README.md ("Multi-node training"); `python -m pipeline_project.defs.resources.launchers
  jobset ...` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import dagster as dg
from pydantic import Field

from pipeline_project.settings import AWS_ACCESS_KEY_ENV, AWS_SECRET_KEY_ENV, KAFKA_SASL_PASSWORD_ENV

if TYPE_CHECKING:
    from pipeline_project.training.job import JobConfig

# Dagster's own Pipes clients read this preview property of their message reader on every launch; not our call.
warnings.filterwarnings(
    "ignore",
    message="Function `PipesMessageReader.expected_writer_count` is currently in preview",
    category=dg.PreviewWarning,
)

JOB_CONFIG_ENV = "PIPELINE_TRAINER_JOB"
"""The environment variable that carries the `JobConfig` JSON (the entry point's `--config-env`)."""
ENTRYPOINT = "pipeline_project.training.entrypoint"
TRAINER_CONTAINER = "trainer"
MLFLOW_TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"  # read by the mlflow client itself, when the server wants a token
SHM_PATH = "/dev/shm"
SCRATCH_PATH = "/scratch"
RDZV_PORT = 29400
JOB_CONFIG_KEY = "job.json"  # the key of the job ConfigMap of the multi-node recipe

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
    tolerations: list[dict[str, str]] = Field(default_factory=lambda: [dict(GPU_TOLERATION)])
    shm_size: str = "16Gi"
    """sizeLimit of the memory-backed /dev/shm (NCCL and the loader's pinned buffers live there)."""
    scratch_size: str = "200Gi"
    """sizeLimit of the scratch emptyDir (TMPDIR): the downloaded and the new checkpoint."""
    cpu: str | None = None
    """CPU request (no CPU limit: throttling a trainer only slows it)."""
    memory: str | None = None
    """Memory request and limit."""
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
    pod_wait_timeout_s: float = 86400.0
    """How long the run waits for the trainer pod; also the pod's activeDeadlineSeconds, so a hung trainer pod
    is killed, its step fails and the run's slot frees."""
    delete_pod_on_completion: bool = True

    @classmethod
    def from_json(cls, text: str | None) -> TrainerLaunch:
        """The launch a deployment configures: JSON of these fields (PIPELINE_TRAINER_LAUNCH); unset: subprocess."""
        return cls.model_validate_json(text) if text else cls()


def _secret_ref(env_name: str, ref: str, optional: bool) -> dict[str, Any]:
    secret, sep, key = ref.partition("/")
    if not (secret and sep and key):
        raise ValueError(f"secret_env[{env_name!r}] = {ref!r}: expected '<secret name>/<key>'")
    return {"name": env_name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": optional}}}


def trainer_env(job: JobConfig) -> dict[str, str]:
    """What the launcher adds to the trainer's environment: the job itself, and unbuffered output."""
    return {JOB_CONFIG_ENV: job.model_dump_json(), "PYTHONUNBUFFERED": "1"}


def entry_args() -> list[str]:
    return ["-m", ENTRYPOINT, "--config-env", JOB_CONFIG_ENV]


def subprocess_command(nproc: int, python: str | None = None, niceness: int = 0) -> list[str]:
    """The local command: the entry point, under `torchrun --standalone` for several processes; under
    `nice -n niceness` when that is above 0."""
    python = python or sys.executable
    nice = ["nice", "-n", str(niceness)] if niceness > 0 else []
    if nproc > 1:
        return [
            *nice,
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            *entry_args(),
        ]
    return [*nice, python, *entry_args()]


def pod_command(gpus: int) -> list[str]:
    """One pod, one node: torchrun with a process per GPU of the pod (one CPU process without GPUs)."""
    return ["torchrun", "--standalone", "--nnodes=1", f"--nproc-per-node={max(1, gpus)}", *entry_args()]


def multinode_command(
    name: str,
    nodes: int,
    gpus: int,
    *,
    endpoint: str | None = None,
    max_restarts: int = 0,
    torchrun: Sequence[str] = ("torchrun",),
) -> list[str]:
    """torchrun across `nodes` nodes of `max(1, gpus)` processes each: c10d rendezvous at `endpoint`.

    The JobSet passes no endpoint: the first pod's stable DNS name. Other transports (the namespace cluster's
    `cluster exec`, docs/cluster.md) name the first node's host and how torchrun is started there. c10d assigns
    the node ranks itself (torchrun ignores --node-rank for it); NODE_RANK is in the env for logs. With
    `max_restarts`, torchrun restarts every node's workers after a failure, re-forming the group.
    """
    endpoint = endpoint or f"{name}-node-0-0.{name}:{RDZV_PORT}"
    restarts = [f"--max-restarts={max_restarts}"] if max_restarts else []
    return [
        *torchrun,
        f"--nnodes={nodes}",
        f"--nproc-per-node={max(1, gpus)}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={name}",
        *restarts,
        *entry_args(),
    ]


def k8s_pod_spec(launch: TrainerLaunch, command: list[str] | None = None) -> dict[str, Any]:
    """The trainer pod's spec (Kubernetes JSON field names), PipesK8sClient's `base_pod_spec`."""
    if not launch.image:
        raise ValueError("TrainerLaunch.image is required to run the trainer in a pod (launcher 'k8s')")
    unknown = set(launch.optional_secrets) - set(launch.secret_env)
    if unknown:
        raise ValueError(f"optional_secrets names env vars that secret_env does not set: {sorted(unknown)}")
    env = [_secret_ref(name, ref, name in launch.optional_secrets) for name, ref in launch.secret_env.items()]
    env += [{"name": k, "value": v} for k, v in {**launch.env, "TMPDIR": SCRATCH_PATH}.items()]
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if launch.gpus_per_pod > 0:
        limits["nvidia.com/gpu"] = str(launch.gpus_per_pod)
    if launch.memory:
        limits["memory"] = requests["memory"] = launch.memory
    if launch.cpu:
        requests["cpu"] = launch.cpu
    mounts = [{"name": "dshm", "mountPath": SHM_PATH}, {"name": "scratch", "mountPath": SCRATCH_PATH}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": launch.shm_size}},
        {"name": "scratch", "emptyDir": {"sizeLimit": launch.scratch_size}},
    ]
    for i, (secret, path) in enumerate(sorted(launch.secret_volumes.items())):
        mounts.append({"name": f"secret-{i}", "mountPath": path, "readOnly": True})
        volumes.append({"name": f"secret-{i}", "secret": {"secretName": secret}})
    container: dict[str, Any] = {
        "name": TRAINER_CONTAINER,
        "image": launch.image,
        "imagePullPolicy": launch.image_pull_policy,
        "command": command or pod_command(launch.gpus_per_pod),
        "env": env,
        "resources": {k: v for k, v in {"limits": limits, "requests": requests}.items() if v},
        "volumeMounts": mounts,
    }
    if launch.env_config_maps:
        container["envFrom"] = [{"configMapRef": {"name": name}} for name in launch.env_config_maps]
    if launch.metrics_port:
        ranks = range(max(1, launch.gpus_per_pod))
        container["ports"] = [{"name": f"metrics-r{i}", "containerPort": launch.metrics_port + i} for i in ranks]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(launch.pod_wait_timeout_s),
        "containers": [container],
        "volumes": volumes,
    }
    if launch.service_account:
        spec["serviceAccountName"] = launch.service_account
    if launch.node_selector:
        spec["nodeSelector"] = dict(launch.node_selector)
    if launch.tolerations:
        spec["tolerations"] = [dict(t) for t in launch.tolerations]
    return spec


def k8s_pod_meta(launch: TrainerLaunch) -> dict[str, Any]:
    return {"labels": {"app.kubernetes.io/name": "pipeline-trainer", **launch.labels}}


def render_k8s_pod(launch: TrainerLaunch, job: JobConfig, pod_name: str = "trainer") -> dict[str, Any]:
    """The Pod that PipesK8sClient would create (its own `build_pod_body`), as Kubernetes JSON, without pipes'
    bootstrap variables: for tests and for a look before launching."""
    import kubernetes
    from dagster_k8s.pipes import build_pod_body

    pod = build_pod_body(
        pod_name=pod_name,
        image=None,
        command=None,
        env_vars=trainer_env(job),
        base_pod_meta=k8s_pod_meta(launch),
        base_pod_spec=k8s_pod_spec(launch),
    )
    return {"apiVersion": "v1", "kind": "Pod", **kubernetes.client.ApiClient().sanitize_for_serialization(pod)}


def launch_trainer(
    context: dg.AssetExecutionContext, launch: TrainerLaunch, job: JobConfig, nproc: int, niceness: int = 0
) -> dg.PipesClientCompletedInvocation:
    """Run one training invocation with the configured launcher; `nproc` is the local process count, `niceness`
    the local process's CPU priority (a pod's is its requests and limits). The job travels in an environment
    variable, which Linux caps at 128 KiB (about 400 batches inline), so its per-batch part goes to S3 first
    (`training.backlog`)."""
    from pipeline_project.training.backlog import by_reference

    if job.partitions or job.shard_manifests or job.batch_offsets:
        job = by_reference(job, job.settings().s3_client(), context.run.run_id)
        context.log.info(f"{job.backlog_batches} batches listed in {job.backlog_uri}")
    if launch.launcher == "k8s":
        from dagster_k8s import PipesK8sClient

        return PipesK8sClient().run(
            context=context,
            namespace=launch.namespace,
            env=trainer_env(job),
            base_pod_meta=k8s_pod_meta(launch),
            base_pod_spec=k8s_pod_spec(launch),
            pod_wait_timeout=launch.pod_wait_timeout_s,
            delete_pod_on_completion=launch.delete_pod_on_completion,
        )
    # the subprocess inherits this environment: its secrets (S3 keys, KAFKA_SASL_PASSWORD) travel that way
    client = dg.PipesSubprocessClient(env={**os.environ, **trainer_env(job)})
    return client.run(command=subprocess_command(nproc, niceness=niceness), context=context)


def jobset_manifest(
    launch: TrainerLaunch, *, name: str, nodes: int, job_configmap: str, namespace: str, max_restarts: int = 2
) -> dict[str, Any]:
    """A JobSet (jobset.x-k8s.io/v1alpha2) that trains on `nodes` pods of `launch.gpus_per_pod` GPUs each.

    One Indexed Job of `nodes` pods; JobSet gives each pod the DNS name `<name>-node-0-<index>.<name>`, so the
    rendezvous endpoint is known before the pods exist. The JobConfig comes from key `job.json` of ConfigMap
    `job_configmap`. Each pod is one node with its own scratch volume, so each node downloads the previous
    checkpoint once (see deploy/README.md for the trainer's part of that).
    """
    if nodes < 1:
        raise ValueError("nodes must be >= 1")
    spec = k8s_pod_spec(launch, command=multinode_command(name, nodes, launch.gpus_per_pod))
    del spec["activeDeadlineSeconds"]  # a hand-started JobSet runs as long as its operator lets it
    container = spec["containers"][0]
    container["env"] = [
        {"name": JOB_CONFIG_ENV, "valueFrom": {"configMapKeyRef": {"name": job_configmap, "key": JOB_CONFIG_KEY}}},
        {
            "name": "NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *container["env"],
    ]
    container["ports"] = [{"name": "rdzv", "containerPort": RDZV_PORT}, *container.get("ports", [])]
    job_spec = {
        "parallelism": nodes,
        "completions": nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {"metadata": k8s_pod_meta(launch), "spec": spec},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job_spec}}],
        },
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline_project.defs.resources.launchers jobset ...`: print the multi-node recipe as YAML."""
    import yaml

    parser = argparse.ArgumentParser(description="render the trainer's Kubernetes manifests")
    parser.add_argument("what", choices=["jobset"])
    parser.add_argument("--name", default="deepseek-multinode")
    parser.add_argument("--namespace", default="pipeline")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--image", required=True)
    parser.add_argument("--job-configmap", default="deepseek-job")
    parser.add_argument("--service-account", default="pipeline-trainer")
    parser.add_argument("--kafka-ca-secret", help="Secret with the Kafka cluster CA, mounted at /etc/kafka-ca")
    parser.add_argument("--settings-configmap", default="pipeline-settings", help="ConfigMap taken as env (envFrom)")
    parser.add_argument("--metrics-port", type=int, default=9400, help="PIPELINE_METRICS_PORT of that ConfigMap")
    args = parser.parse_args(argv)
    launch = TrainerLaunch(
        launcher="k8s",
        image=args.image,
        gpus_per_pod=args.gpus_per_node,
        service_account=args.service_account,
        secret_volumes={args.kafka_ca_secret: "/etc/kafka-ca"} if args.kafka_ca_secret else {},
        env_config_maps=[args.settings_configmap] if args.settings_configmap else [],
        metrics_port=args.metrics_port,
    )
    manifest = jobset_manifest(
        launch, name=args.name, nodes=args.nodes, job_configmap=args.job_configmap, namespace=args.namespace
    )
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
