"""The GPU trainer, launched out of process through dagster-pipes.

Locally it is a subprocess (`torchrun` when there are several GPUs); on Kubernetes, swap the
`PipesSubprocessClient` for `dagster_k8s.PipesK8sClient` with the same command.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any, Literal

import dagster as dg


class TrainerResource(dg.ConfigurableResource):
    preset: Literal["tiny", "small", "from_pretrained"] = "tiny"
    pretrained: str | None = None
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 10
    decay_steps: int = 10_000
    batch_size: int = 8
    max_steps: int = 0
    """0 trains on everything new in the topic (bounded mode); >0 caps the steps."""
    run_name: str = "deepseek"
    """Checkpoints live under <checkpoints_prefix><run_name>/; a new name starts a new lineage."""
    nproc_per_node: int = 0
    """0 = one process per visible GPU (torchrun when more than one), one CPU process without GPUs."""
    seed: int = 0
    experiment_name: str = "deepseek-pretraining"

    def job_config(
        self,
        *,
        kafka,
        topic: str,
        seq_len: int,
        s3_endpoint: str | None,
        bucket: str,
        checkpoint_prefix: str,
        mlflow_tracking_uri: str,
        dagster_run_id: str,
        partitions: list[str],
    ) -> dict[str, Any]:
        """The `pipeline_project.training.entrypoint.JobConfig` of one materialization, as JSON-able dict."""
        return {
            "train": {
                "preset": {"name": self.preset, "pretrained": self.pretrained},
                "lr": self.lr,
                "min_lr": self.min_lr,
                "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps,
                "batch_size": self.batch_size,
                "max_steps": self.max_steps or None,
                "seed": self.seed,
            },
            "kafka": kafka.model_dump(exclude={"sasl_password"}),  # secrets reach the trainer by env only
            "topic": topic,
            "seq_len": seq_len,
            "s3_endpoint": s3_endpoint,
            "bucket": bucket,
            "checkpoint_prefix": checkpoint_prefix,
            "mlflow_tracking_uri": mlflow_tracking_uri,
            "experiment_name": self.experiment_name,
            "dagster_run_id": dagster_run_id,
            "partitions": partitions,
        }

    def _nproc(self) -> int:
        if self.nproc_per_node > 0:
            return self.nproc_per_node
        try:
            import torch

            return max(1, torch.cuda.device_count())
        except Exception:  # noqa: BLE001 - no usable CUDA means one CPU process
            return 1

    def command(self, config_path: str) -> list[str]:
        nproc = self._nproc()
        entry = ["-m", "pipeline_project.training.entrypoint", "--config", config_path]
        if nproc > 1:
            return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *entry]
        return [sys.executable, *entry]

    def run(self, context: dg.AssetExecutionContext, job_config: dict[str, Any]) -> dg.MaterializeResult:
        workdir = tempfile.mkdtemp(prefix="trainer-")
        try:
            config_path = os.path.join(workdir, "job.json")
            with open(config_path, "w") as f:
                json.dump(job_config, f)
            client = dg.PipesSubprocessClient(env={**os.environ, "PYTHONUNBUFFERED": "1"})
            return client.run(command=self.command(config_path), context=context).get_materialize_result()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
