"""The GPU trainer, launched out of process through dagster-pipes.

Where it runs is the `launch` config (`resources/launchers.py`): a local subprocess (`torchrun` when there
are several GPUs) or a GPU pod through `dagster_k8s.PipesK8sClient`, with the same entry point.

The hand-off is a typed `JobConfig` (`pipeline_project.training.job`), built and validated here and passed
as `model_dump_json()` in the trainer's environment (never a local file), which leaves the Kafka SASL
password out; the trainer process reads that from its own environment. Every training default is declared
once, in `pipeline_project.training.config.TrainConfig` (and `JobConfig`): a field left unset here (None) keeps it.
The training modules are imported inside the methods, so loading this resource imports no torch.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, get_args

import dagster as dg

from pipeline_project.defs.resources.launchers import TrainerLaunch, launch_trainer
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import PresetName  # pure pydantic: no torch

SENSOR_TAG = "dagster/sensor_name"  # Dagster's tag on a run a sensor requested (the checkpoint trigger's)

if TYPE_CHECKING:
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.training.job import JobConfig

# Dagster config takes an optional Enum (not an optional Literal); its members are TrainConfig's preset names.
Preset = enum.Enum("Preset", {name: name for name in get_args(PresetName)}, type=str)

# TrainerResource field -> TrainConfig field, each passed on only when set
_TRAIN_OVERRIDES = (
    "lr",
    "min_lr",
    "warmup_steps",
    "decay_steps",
    "batch_size",
    "max_steps",
    "checkpoint_every",
    "seed",
)


class TrainerResource(dg.ConfigurableResource):
    """Overrides of the trainer's configuration; None keeps `TrainConfig`'s / `JobConfig`'s default."""

    preset: Preset | None = None
    pretrained: str | None = None
    lr: float | None = None
    min_lr: float | None = None
    warmup_steps: int | None = None
    decay_steps: int | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    """None or 0 trains on everything new in the topic (bounded mode); >0 caps the steps. A run's own bound
    (`deepseek_checkpoint`'s `max_steps` config, which the checkpoint trigger sets) can only lower it."""
    checkpoint_every: int | None = None
    """Mid-run checkpoint every N steps, so a crash loses at most N steps. None keeps TrainConfig's default
    (100, see `TrainConfig.checkpoint_every`); 0 checkpoints only at the end."""
    run_name: str = "deepseek"
    """Checkpoints live under <checkpoints_prefix><run_name>/; a new name starts a new lineage."""
    registered_model: str | None = None
    """MLflow registered model whose versions are this lineage's checkpoints; None: the run name; "": none."""
    log_model_to_mlflow: bool | None = None
    """Also log the final weights as an MLflow model (a copy in MLflow's artifact store); None keeps JobConfig's."""
    nproc_per_node: int = 0
    """0 = one process per visible GPU (torchrun when more than one), one CPU process without GPUs."""
    seed: int | None = None
    experiment_name: str | None = None
    launch: TrainerLaunch = TrainerLaunch()
    mixture_proportions: dict[str, float] | None = None
    """Train on a domain mixture, e.g. {"en_web": 0.5, "zh_web": 0.3, "code": 0.15, "books": 0.05}; None: every
    block of the topic in offset order (streaming/mixture.py)."""
    on_domain_exhausted: str | None = None
    """With a mixture: `wait` (TrainConfig's default), `stop` or `renormalize` when a domain runs dry."""
    metrics_port: int = 0
    """The trainer ranks' Prometheus /metrics base port (PIPELINE_METRICS_PORT; rank r: base + local rank); 0: off."""
    cpu_niceness: int = 10
    """A training the checkpoint trigger started on a machine without a GPU runs at this niceness (`nice -n`), so it
    never starves the pipeline (or a laptop) of CPU; 0: normal priority. Never applied with a GPU."""

    def job_config(
        self,
        *,
        kafka: KafkaSettings,
        topic: TopicSpec,
        s3_endpoint: str | None,
        bucket: str,
        checkpoint_prefix: str,
        mlflow_tracking_uri: str,
        dagster_run_id: str,
        partitions: list[str],
        shard_manifests: dict[str, str] | None = None,
        batch_offsets: dict[str, dict] | None = None,
        max_steps: int | None = None,
    ) -> JobConfig:
        """The validated `JobConfig` of one materialization; `max_steps` is the run's own bound (the tighter of it
        and this resource's `max_steps` holds)."""
        from pipeline_project.training.job import JobConfig

        train: dict[str, Any] = {
            name: getattr(self, name) for name in _TRAIN_OVERRIDES if getattr(self, name) is not None
        }
        bounds = [steps for steps in (self.max_steps, max_steps) if steps and steps > 0]
        if bounds:
            train["max_steps"] = min(bounds)
        name = self.preset.value if self.preset is not None else None
        preset = {k: v for k, v in {"name": name, "pretrained": self.pretrained}.items() if v is not None}
        if preset:
            train["preset"] = preset
        if self.mixture_proportions is not None:
            train["mixture"] = {"proportions": self.mixture_proportions}
            if self.on_domain_exhausted is not None:
                train["mixture"]["on_domain_exhausted"] = self.on_domain_exhausted
        elif self.on_domain_exhausted is not None:
            raise ValueError("trainer config: on_domain_exhausted is set without mixture_proportions")
        optional = {
            k: getattr(self, k) for k in ("experiment_name", "log_model_to_mlflow") if getattr(self, k) is not None
        }
        return JobConfig.model_validate(
            {
                "train": train,
                "kafka": kafka,  # its SASL password stays out of the job file (JobConfig's serializer)
                "topic": topic,
                "s3_endpoint": s3_endpoint,
                "bucket": bucket,
                "checkpoint_prefix": checkpoint_prefix,
                "mlflow_tracking_uri": mlflow_tracking_uri,
                "dagster_run_id": dagster_run_id,
                "mlflow_run_name": f"{self.run_name}-{dagster_run_id[:8]}",
                "partitions": partitions,
                "shard_manifests": shard_manifests or {},
                "batch_offsets": batch_offsets or {},
                "registered_model_name": (self.run_name if self.registered_model is None else self.registered_model)
                or None,
                "metrics_port": self.metrics_port,
                **optional,
            }
        )

    def _gpus(self) -> int:
        try:
            import torch

            return torch.cuda.device_count()
        except Exception:  # noqa: BLE001 - no usable CUDA: no GPU
            return 0

    def run(self, context: dg.AssetExecutionContext, job: JobConfig) -> dg.MaterializeResult:
        nproc, niceness = 1, 0  # a pod counts its own GPUs, and its CPU share is its requests and limits
        if self.launch.launcher == "subprocess":
            triggered = self.cpu_niceness > 0 and SENSOR_TAG in context.run.tags
            # torch is imported (seconds, in the run worker) only when the answer is needed
            gpus = self._gpus() if not self.nproc_per_node or triggered else None
            nproc = self.nproc_per_node or max(1, gpus or 0)
            niceness = self.cpu_niceness if triggered and gpus == 0 else 0
        return launch_trainer(context, self.launch, job, nproc, niceness=niceness).get_materialize_result()
