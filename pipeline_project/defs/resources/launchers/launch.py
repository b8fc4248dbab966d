"""One training invocation through dagster-pipes, with the launcher the deployment configured."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import dagster as dg

from pipeline_project.defs.resources.launchers import owner
from pipeline_project.defs.resources.launchers.commands import subprocess_command, trainer_env
from pipeline_project.defs.resources.launchers.config import TrainerLaunch
from pipeline_project.defs.resources.launchers.pod import k8s_pod_meta, k8s_pod_spec

if TYPE_CHECKING:
    from pipeline_project.training.job import JobConfig


def launch_trainer(
    context: dg.AssetExecutionContext, launch: TrainerLaunch, job: JobConfig, nproc: int, niceness: int = 0
) -> dg.PipesClientCompletedInvocation:
    """Run one training invocation with the configured launcher; `nproc` is the local process count, `niceness`
    the local process's CPU priority (a pod's is its requests and limits). The job travels in an environment
    variable, which Linux caps at 128 KiB (about 400 batches inline), so its per-batch part goes to S3 first
    (`training.backlog`). A trainer pod is owned by the run pod that launched it (`owner.run_pod_owner`)."""
    from pipeline_project.training.backlog import by_reference

    if job.partitions or job.shard_manifests or job.batch_offsets:
        job = by_reference(job, job.settings().s3_client(), context.run.run_id)
        context.log.info(f"{job.backlog_batches} batches listed in {job.backlog_uri}")
    if launch.launcher == "k8s":
        from dagster_k8s import PipesK8sClient

        namespace = launch.namespace or owner.own_namespace()
        return PipesK8sClient().run(
            context=context,
            namespace=namespace,
            env=trainer_env(job),
            base_pod_meta=k8s_pod_meta(launch, owner.run_pod_owner(namespace)),
            base_pod_spec=k8s_pod_spec(launch),
            pod_wait_timeout=launch.pod_wait_timeout_s,
            delete_pod_on_completion=launch.delete_pod_on_completion,
        )
    # the subprocess inherits this environment: its secrets (S3 keys, KAFKA_SASL_PASSWORD) travel that way
    client = dg.PipesSubprocessClient(env={**os.environ, **trainer_env(job)})
    return client.run(command=subprocess_command(nproc, niceness=niceness), context=context)
