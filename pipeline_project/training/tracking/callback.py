"""The MLflow side of one trainer invocation: `Progress`, the per-step callback of rank 0's loop.

- At the first step it opens the MLflow run (`start_job_run`); each step's metrics go to MLflow's async queue
  (rank 0 never waits on the server) with the per-expert loads split off into one table artifact.
- Each checkpoint that `latest.json` moved to is registered (`register_checkpoint`) as a model version whose
  tags carry its lineage: Dagster run, data partitions, the Kafka offsets read up to it, config hash, and the loss
  summary up to it (`loss_summary`).
- At the end (`log_final`): the last metrics with the loss summary, the expert-load table, the run's inputs
  (Kafka offsets and the cleaned-shard manifests, `mlflow_lineage.log_training_inputs`) and the loss-curve PNG.

MLflow is best effort (run.py's contract, point 3): every call goes through `Progress.mlflow`, and the first
failure turns MLflow off for the rest of the invocation (a warning and `mlflow_error`), never training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline_project.common.metrics import prometheus as prom
from pipeline_project.common.progress import RateEta
from pipeline_project.common.run_tags import config_hash
from pipeline_project.training.checkpoint.store import CheckpointRef
from pipeline_project.training.loss_summary import summarize_losses
from pipeline_project.training.positions import offsets_consumed, positions
from pipeline_project.training.resume import TrainingState
from pipeline_project.training.tracking import lineage
from pipeline_project.training.tracking.loss_curve import LOSS_CURVE_FILE, render_loss_curve
from pipeline_project.training.tracking.run import EXPERT_LOAD_TABLE, MlflowRun, split_expert_load, start_job_run
from pipeline_project.training.trainer import StepMetrics


@dataclass
class Progress:
    """The per-step callback (rank 0): keeps the metrics, logs them, and opens the MLflow run at the first step."""

    inv: Any  # run._Invocation: job, dist, device, report, tokenizer
    state: TrainingState
    start_states: list[Any] = field(default_factory=list)  # every rank's loader state before the first step
    metrics: list[StepMetrics] = field(default_factory=list)
    mlflow_run: MlflowRun | None = None
    expert_load: dict[str, list] = field(default_factory=dict)  # per-expert loads: one table artifact at the end
    mlflow_error: str | None = None  # the first MLflow failure; MLflow is skipped after it
    model_version: str | None = None  # the newest registered version of this invocation's checkpoints
    loss_curve_url: str | None = None
    mixture: Any = None  # mixture_report.MixtureReport with `train.mixture`: realized shares, dry-domain events
    # steps of this invocation: toward `max_steps` when capped, else the ETA of working off the consumer lag
    _eta: RateEta = field(init=False)

    def __post_init__(self) -> None:
        self._eta = RateEta("steps", total=self.inv.job.train.max_steps or None, backlog_unit="messages")

    def __call__(self, metrics: StepMetrics) -> None:
        job = self.inv.job
        self.metrics.append(metrics)
        prom.record_train_step(metrics, rank=self.inv.dist.rank)
        if job.mlflow_tracking_uri and self.mlflow_run is None and self.mlflow_error is None:
            self.mlflow_run = self.mlflow("start the run", self._start_run)
            if self.mlflow_run is not None:
                self.inv.report.info(f"MLflow run {self.mlflow_run.url}")
        if self.mlflow_run is not None:
            summary = split_expert_load(metrics.as_metrics(), metrics.step, self.expert_load)
            if self.mixture is not None:
                summary.update(self.mixture.step_metrics())
                if tags := self.mixture.take_tags():
                    self.mlflow("tag dry domains", self.mlflow_run.set_tags, tags)
            self.mlflow("log metrics", self.mlflow_run.log_metrics, summary, step=metrics.step)
        self.inv.report.info(
            f"step {metrics.step} loss {metrics.loss:.4f} lr {metrics.lr:.2e} {metrics.tokens_per_s:,.0f} tok/s "
            f"data-wait {100 * metrics.data_wait_fraction:.1f}% lag {metrics.consumer_lag} "
            f"({self._eta.update(metrics.step - self.state.step, metrics.consumer_lag)})"
        )

    def _start_run(self) -> MlflowRun:
        return start_job_run(
            self.inv.job,
            model_config=self.state.model.config.to_dict(),
            tokenizer=self.inv.tokenizer,
            resumed_from_step=self.state.step,
            world_size=self.inv.dist.world_size,
            device=str(self.inv.device),
        )

    def mlflow(self, what: str, call: Callable[..., Any], *args: Any, last_attempt: bool = False, **kwargs: Any):
        """`call(*args, **kwargs)`, or None when it fails or an earlier MLflow call failed.

        A failure is a warning, never an error: training and checkpoints go on without MLflow.
        """
        if self.mlflow_error is not None and not last_attempt:
            return None
        try:
            return call(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any MLflow failure: connection, server error, artifact store
            error = f"{what}: {type(exc).__name__}: {exc}"[:500]
            self.mlflow_error = self.mlflow_error or error
            self.inv.report.warning(f"MLflow unavailable, training goes on without it ({error})")
            return None

    @property
    def registered_model(self) -> str | None:
        return self.inv.job.registered_model_name if self.mlflow_run is not None else None

    def register_checkpoint(self, ref: CheckpointRef, data_states: list[Any]) -> None:
        """A model version for the checkpoint `latest.json` now points at (rank 0, after the upload)."""
        name = self.registered_model
        if name is None or not self.inv.dist.is_main:
            return
        job = self.inv.job
        tags = lineage.lineage_tags(
            dagster_run_id=job.dagster_run_id,
            partitions=job.partitions,
            offsets=offsets_consumed(self.start_states, data_states),
            config_hash=config_hash(job.train.model_dump(mode="json")),
            step=ref.step,
            checkpoint_uri=ref.uri,
            topic=job.topic.name,
            tokenizer_hash=self.inv.tokenizer.hash,
            **self.loss_tags(ref.step),
        )
        run = self.mlflow_run
        version = self.mlflow(
            "register the checkpoint",
            lineage.register_checkpoint,
            run.client,
            name,
            source=ref.hf_uri,
            run_id=run.run_id,
            tags=tags,
            description=f"step {ref.step}: {ref.uri}",
        )
        if version is not None:
            self.model_version = version
            self.inv.report.info(f"registered {name} version {version} ({lineage.CHECKPOINT_ALIAS}) <- {ref.hf_uri}")

    def loss_upto(self, step: int) -> dict[str, Any] | None:
        """The loss summary of this invocation's logged steps up to `step` (rank 0; every `train.log_every`-th
        step), in plain values for a checkpoint's meta; None on the other ranks and before the first step."""
        summary = summarize_losses([m.loss for m in self.metrics if m.step <= step])
        return summary.model_dump() if summary else None

    def loss_tags(self, step: int) -> dict[str, str]:
        """The same summary as tags of the checkpoint's model version in MLflow's registry."""
        summary = summarize_losses([m.loss for m in self.metrics if m.step <= step])
        if summary is None:
            return {}
        return {
            "loss_smoothed": f"{summary.smoothed:.4f}",
            "loss_change": f"{summary.change:+.4f}",
            "loss_window": str(summary.window),
        }

    def log_final(self, metrics: dict[str, float], step: int, end_states: list[Any]) -> None:
        if self.mlflow_run is None or not self.inv.dist.is_main:
            return
        run = self.mlflow_run
        summary = summarize_losses([m.loss for m in self.metrics])
        metrics = {**metrics, **(summary.as_metrics() if summary else {})}
        self.mlflow("log final metrics", run.log_metrics, metrics, step=step)
        if self.expert_load:
            self.mlflow("log expert load", run.log_table, self.expert_load, EXPERT_LOAD_TABLE)
        self.mlflow("log the inputs", lineage.log_training_inputs, run.client, run.run_id, self._datasets(end_states))
        png = render_loss_curve([m.step for m in self.metrics], [m.loss for m in self.metrics], self._curve_title())
        if png is not None and self.mlflow("log the loss curve", run.log_bytes, png, LOSS_CURVE_FILE) is not None:
            self.loss_curve_url = lineage.artifact_url(run.tracking_uri, run.run_id, LOSS_CURVE_FILE)

    def _datasets(self, end_states: list[Any]) -> list[Any]:
        job = self.inv.job
        consumed = offsets_consumed(self.start_states, end_states)
        datasets = [
            lineage.kafka_offsets_dataset(job.kafka.bootstrap_servers, job.topic.name, consumed, positions(end_states))
        ]
        manifests = {b: uri for b, uri in job.shard_manifests.items() if _overlaps(job.batch_offsets.get(b), consumed)}
        if manifests:
            datasets.append(lineage.shard_manifests_dataset(manifests))
        return datasets

    def _curve_title(self) -> str:
        job = self.inv.job
        return f"{job.mlflow_run_name or job.experiment_name} (Dagster run {(job.dagster_run_id or '-')[:8]})"

    def end(self, status: str) -> None:
        if self.mlflow_run is not None:
            self.mlflow("end the run", self.mlflow_run.end, status, last_attempt=True)


def _overlaps(ranges: dict[str, list[int]] | None, consumed: dict[str, list[int]]) -> bool:
    """Whether a batch's offsets ({partition: [first, last]}) meet the offsets read ({partition: [first, end)});
    a batch whose offsets are unknown counts as read."""
    if not ranges:
        return True
    return any(
        p in consumed and first < consumed[p][1] and last >= consumed[p][0] for p, (first, last) in ranges.items()
    )
