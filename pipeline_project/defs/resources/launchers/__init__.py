"""How the trainer process starts: a local subprocess or a GPU pod, both through dagster-pipes.

Which one is resource config (`TrainerLaunch.launcher`, config.py), never a branch in an asset. Both launchers start
the same entry point, `python -m pipeline_project.training.entrypoint --config-env PIPELINE_TRAINER_JOB`
(commands.py), with the `JobConfig` JSON in that environment variable. No file is written on the run worker, so a
pod on another node reads its job exactly as a local subprocess does. The JSON carries no secret (`JobConfig` leaves
the SASL password out); in a pod, each secret is an env entry with a `secretKeyRef`: by reference, never by value.

- `subprocess`: `dagster.PipesSubprocessClient`. The trainer inherits the run worker's environment (secrets
  included), and `torchrun --standalone` starts one process per local GPU when there are several.
- `k8s`: `dagster_k8s.PipesK8sClient`, imported only when it is used, so the code location stays light. It
  launches one pod from `k8s_pod_spec` (pod.py): GPU limits, CPU and memory requests equal to their limits,
  tolerations and node selector, `/dev/shm` as a memory-backed emptyDir, a scratch emptyDir as TMPDIR for
  checkpoints, secrets as env by reference, NCCL's network, the autoscalers' do-not-disrupt annotations, the
  `restricted` Pod Security Standard, and `torchrun --nproc-per-node=<gpus_per_pod>`. The run pod owns it
  (owner.py). Pipes messages come back through the pod's log.
- Several nodes: `jobset_manifest` (jobset.py) renders the same pod as an Indexed Job in a JobSet, with
  `torchrun --nnodes`. The recipe is in deploy/README.md ("Multi-node training").
"""

import warnings

import dagster as dg

from pipeline_project.defs.resources.launchers.commands import (
    entry_args,
    multinode_command,
    pod_command,
    subprocess_command,
    trainer_env,
)
from pipeline_project.defs.resources.launchers.config import (
    DEFAULT_OPTIONAL_SECRETS,
    DEFAULT_SECRET_ENV,
    DO_NOT_DISRUPT,
    ENTRYPOINT,
    GPU_NODE_SELECTOR,
    GPU_TOLERATION,
    JOB_CONFIG_ENV,
    JOB_CONFIG_KEY,
    MLFLOW_TOKEN_ENV,
    RDZV_PORT,
    SCRATCH_PATH,
    SHM_PATH,
    TRAINER_CONTAINER,
    TrainerLaunch,
)
from pipeline_project.defs.resources.launchers.jobset import jobset_manifest, launch_from_configmap
from pipeline_project.defs.resources.launchers.launch import launch_trainer
from pipeline_project.defs.resources.launchers.owner import run_pod_owner
from pipeline_project.defs.resources.launchers.pod import (
    container_security_context,
    k8s_pod_meta,
    k8s_pod_spec,
    pod_security_context,
    render_k8s_pod,
)

# Dagster's own Pipes clients read this preview property of their message reader on every launch; not our call.
warnings.filterwarnings(
    "ignore",
    message="Function `PipesMessageReader.expected_writer_count` is currently in preview",
    category=dg.PreviewWarning,
)

__all__ = [
    "DEFAULT_OPTIONAL_SECRETS",
    "DEFAULT_SECRET_ENV",
    "DO_NOT_DISRUPT",
    "ENTRYPOINT",
    "GPU_NODE_SELECTOR",
    "GPU_TOLERATION",
    "JOB_CONFIG_ENV",
    "JOB_CONFIG_KEY",
    "MLFLOW_TOKEN_ENV",
    "RDZV_PORT",
    "SCRATCH_PATH",
    "SHM_PATH",
    "TRAINER_CONTAINER",
    "TrainerLaunch",
    "container_security_context",
    "entry_args",
    "jobset_manifest",
    "k8s_pod_meta",
    "k8s_pod_spec",
    "launch_from_configmap",
    "launch_trainer",
    "multinode_command",
    "pod_command",
    "pod_security_context",
    "render_k8s_pod",
    "run_pod_owner",
    "subprocess_command",
    "trainer_env",
]
