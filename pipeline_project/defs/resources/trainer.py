"""The GPU trainer, launched out of process through dagster-pipes.

Where it runs is the `launch` config (`resources/launchers.py`): a local subprocess (`torchrun` when there
are several GPUs) or a GPU pod through `dagster_k8s.PipesK8sClient`, with the same entry point.

The hand-off is a typed `JobConfig` (`pipeline_project.training.job`), built and validated here and passed
as `model_dump_json()` in the trainer's environment (never a local file), which leaves the Kafka SASL
password out; the trainer process reads that from its own environment. Every training default is declared
once, in `pipeline_project.training.config.TrainConfig` (and `JobConfig`): a field left unset here (None) keeps it.
A deployment chooses the model, the lineage and the hyper-parameters in its settings (`trainer_from_settings`:
$PIPELINE_TRAIN_MODEL, $PIPELINE_LINEAGE, $PIPELINE_TRAIN_*), so every run, triggered or not, trains them.
The training modules are imported inside the methods, so loading this resource imports no torch.
"""

from __future__ import annotations

import enum
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import dagster as dg
from pydantic import ValidationError, field_validator

from pipeline_project.defs.resources.launchers import TrainerLaunch, launch_trainer
from pipeline_project.settings import DEFAULT_LINEAGE, Settings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import PresetName, TrainConfig  # pure pydantic: no torch

SENSOR_TAG = "dagster/sensor_name"  # Dagster's tag on a run a sensor requested (the checkpoint trigger's)

if TYPE_CHECKING:
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.training.job import JobConfig

# Dagster config takes an optional Enum (not an optional Literal); its members are TrainConfig's preset names.
Preset = enum.Enum("Preset", {name: name for name in get_args(PresetName)}, type=str)
Parallelism = enum.Enum(
    "Parallelism", {name: name for name in get_args(TrainConfig.model_fields["parallelism"].annotation)}, type=str
)
LINEAGE_TAG = "pipeline/lineage"  # on a triggered training run: the lineage it continues ...
MODEL_TAG = "pipeline/model"  # ... and the model it trains
# A lineage names a folder of checkpoints in S3 and an MLflow registered model
LINEAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

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
    "parallelism",
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
    parallelism: Parallelism | None = None
    """`ddp` (every rank holds the whole model) or `fsdp` (sharded, FSDP2); None keeps TrainConfig's default."""
    base_config: str | None = None
    """A whole `TrainConfig` as JSON ($PIPELINE_TRAIN_MODEL given as JSON or a file), the base the fields of this
    resource override; None: TrainConfig's defaults."""
    run_name: str = DEFAULT_LINEAGE
    """Checkpoints live under <checkpoints_prefix><run_name>/; a new name starts a new lineage ($PIPELINE_LINEAGE)."""
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

    @field_validator("run_name")
    @classmethod
    def _lineage_is_a_name(cls, value: str) -> str:
        if not LINEAGE_NAME.fullmatch(value):
            raise ValueError(
                f"lineage {value!r}: letters, digits, '.', '_' and '-', at most 100, starting with a letter or "
                "digit (it names the checkpoints' folder and the registered model)"
            )
        return value

    def train_config(self, max_steps: int | None = None) -> TrainConfig:
        """The validated `TrainConfig` of a run: `base_config` (or TrainConfig's defaults) under this resource's set
        fields. `max_steps` is the run's own bound: the tightest of it, this resource's and the base's holds."""
        train: dict[str, Any] = json.loads(self.base_config) if self.base_config else {}
        bounds = [steps for steps in (train.get("max_steps"), self.max_steps, max_steps) if steps and steps > 0]
        for name in _TRAIN_OVERRIDES:
            value = getattr(self, name)
            if value is not None:
                train[name] = value.value if isinstance(value, enum.Enum) else value
        if bounds:
            train["max_steps"] = min(bounds)
        name = self.preset.value if self.preset is not None else None
        preset = {k: v for k, v in {"name": name, "pretrained": self.pretrained}.items() if v is not None}
        if preset:
            train["preset"] = {**train.get("preset", {}), **preset}
        if self.mixture_proportions is not None:
            train["mixture"] = {"proportions": self.mixture_proportions}
            if self.on_domain_exhausted is not None:
                train["mixture"]["on_domain_exhausted"] = self.on_domain_exhausted
        elif self.on_domain_exhausted is not None:
            raise ValueError("trainer config: on_domain_exhausted is set without mixture_proportions")
        return TrainConfig.model_validate(train)

    def run_tags(self) -> dict[str, str]:
        """The lineage a run of this resource continues and the model it trains, as run tags."""
        preset = self.train_config().preset
        model = f"from_pretrained:{preset.pretrained}" if preset.name == "from_pretrained" else preset.name
        return {LINEAGE_TAG: self.run_name, MODEL_TAG: model + (" (with overrides)" if preset.overrides else "")}

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
        """The validated `JobConfig` of one materialization; `max_steps` is the run's own bound (`train_config`)."""
        from pipeline_project.training.job import JobConfig

        optional = {
            k: getattr(self, k) for k in ("experiment_name", "log_model_to_mlflow") if getattr(self, k) is not None
        }
        return JobConfig.model_validate(
            {
                "train": self.train_config(max_steps),
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


def trainer_from_settings(s: Settings) -> TrainerResource:
    """The trainer a deployment's settings describe: how it launches, the model ($PIPELINE_TRAIN_MODEL), the
    lineage ($PIPELINE_LINEAGE) and the hyper-parameters ($PIPELINE_TRAIN_*). Raises ValueError, naming the
    settings, when they do not make a valid `TrainConfig`, so a bad setting stops the definitions from loading
    instead of failing the first triggered run."""
    try:
        resource = TrainerResource(
            experiment_name=s.mlflow_experiment,
            launch=TrainerLaunch.from_json(s.trainer_launch),
            metrics_port=s.metrics_port,
            run_name=s.lineage,
            lr=s.train_lr,
            min_lr=s.train_min_lr,
            warmup_steps=s.train_warmup_steps,
            decay_steps=s.train_decay_steps,
            batch_size=s.train_batch_size,
            checkpoint_every=s.train_checkpoint_every,
            parallelism=s.train_parallelism,
            **model_setting(s.train_model),
        )
        resource.train_config()
    except ValidationError as err:
        raise ValueError(f"the training settings (PIPELINE_LINEAGE, PIPELINE_TRAIN_*) are not valid: {err}") from None
    return resource


def model_setting(value: str | None) -> dict[str, Any]:
    """The `TrainerResource` fields $PIPELINE_TRAIN_MODEL sets: a preset name -> `preset`; a `TrainConfig` as JSON,
    or the path of a JSON file -> `base_config` (what it sets, validated); unset -> none."""
    if not value:
        return {}
    presets = get_args(PresetName)
    if value in presets:
        train, fields = {"preset": {"name": value}}, {"preset": value}
    else:
        text = value if value.lstrip().startswith("{") else _read_model_file(value, presets)
        try:
            train = json.loads(text)
        except ValueError as err:
            raise ValueError(f"PIPELINE_TRAIN_MODEL: {value!r} is not valid JSON ({err})") from None
        fields = {"base_config": json.dumps(train, sort_keys=True)}
    try:
        TrainConfig.model_validate(train)
    except ValidationError as err:
        raise ValueError(f"PIPELINE_TRAIN_MODEL={value!r} is not a valid TrainConfig: {err}") from None
    return fields


def _read_model_file(path: str, presets: tuple[str, ...]) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise ValueError(
            f"PIPELINE_TRAIN_MODEL={path!r} is neither a preset ({', '.join(presets)}), nor TrainConfig JSON, nor a "
            f"readable JSON file ({err.strerror})"
        ) from None
