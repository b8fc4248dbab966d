"""MLflow logging for one training invocation, through `MlflowClient` (no fluent global run: we are a library).

One run per invocation, tagged with the Dagster run id and the data partitions consumed; flat params
(model config, optimisation settings, tokenizer) so two runs compare side by side; per-step metrics
sent in batches through MLflow's async logging queue (`log_batch(synchronous=False)`), so the training rank
never waits on the tracking server: a failed batch surfaces at the next flush or at `end()`, which waits
`drain_timeout_s` at most; MLflow system metrics for that run id (GPU ones when `nvidia-ml-py` is
installed); the HF weights as a logged model.

Also the project's one `get_or_create_experiment` (safe when two processes create the same experiment at
once) and its one `run_url`; the Dagster `MlflowResource` uses both. This module imports mlflow but neither
torch nor dagster (import it lazily from resources).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import logging
import time
from collections.abc import Iterator, Mapping
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH

from pipeline_project.common.run_tags import config_hash, run_tags

if TYPE_CHECKING:
    from pipeline_project.training.job import JobConfig

log = logging.getLogger(__name__)

_MAX_PARAMS_PER_BATCH = 100
# HF config entries that say where or how the config was loaded, not what the model is: a fresh model and one
# resumed from a checkpoint differ in them (a scratch path, null vs a dtype), so comparing runs would flag them
_RUN_SPECIFIC_MODEL_KEYS = frozenset({"_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version"})
_MAX_METRICS_PER_BATCH = 1000


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts -> {"a.b": "value"} with values as MLflow param strings."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            flat[name] = text[:MAX_PARAM_VAL_LENGTH]
    return flat


@contextlib.contextmanager
def _tracking_uri(uri: str) -> Iterator[None]:
    """mlflow's model-logging helpers resolve the tracking URI globally; point it at ours for the call."""
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)


class MlflowRun:
    """One MLflow run for one training invocation. Create with `MlflowRun.start(...)`."""

    def __init__(
        self,
        client: MlflowClient,
        tracking_uri: str,
        experiment_id: str,
        run_id: str,
        flush_every: int = 10,
        drain_timeout_s: float = 30.0,
    ):
        self.client = client
        self.tracking_uri = tracking_uri.rstrip("/")
        self.experiment_id = experiment_id
        self.run_id = run_id
        self.flush_every = flush_every
        self.drain_timeout_s = drain_timeout_s
        self._pending: list[Metric] = []
        self._in_flight: list[concurrent.futures.Future] = []  # async log_batch calls not yet checked
        self._system_monitor = None

    @classmethod
    def start(
        cls,
        tracking_uri: str,
        experiment_name: str,
        *,
        run_name: str | None = None,
        dagster_run_id: str | None = None,
        partitions: list[str] | None = None,
        tags: Mapping[str, str] | None = None,
        system_metrics: bool = True,
        system_metrics_interval_s: float = 10.0,
    ) -> MlflowRun:
        client = MlflowClient(tracking_uri)
        experiment_id = get_or_create_experiment(client, experiment_name)
        all_tags = dict(tags or {})
        if dagster_run_id:
            all_tags["dagster_run_id"] = dagster_run_id
        if partitions is not None:
            all_tags["data_partitions"] = ",".join(partitions)[:MAX_TAG_VAL_LENGTH]
            all_tags["data_partition_count"] = str(len(partitions))
        run = client.create_run(experiment_id, run_name=run_name, tags=all_tags)
        tracker = cls(client, tracking_uri, experiment_id, run.info.run_id)
        if partitions is not None and len(",".join(partitions)) > MAX_TAG_VAL_LENGTH:
            client.log_dict(run.info.run_id, {"partitions": partitions}, "data_partitions.json")
        if system_metrics:
            tracker.start_system_metrics(system_metrics_interval_s)
        return tracker

    @property
    def url(self) -> str:
        return run_url(self.tracking_uri, self.experiment_id, self.run_id)

    def start_system_metrics(self, interval_s: float = 10.0) -> None:
        """MLflow's monitor (CPU, memory, disk, network; GPU through `pynvml` from `nvidia-ml-py` when installed)."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self._system_monitor = SystemMetricsMonitor(
            self.run_id, sampling_interval=interval_s, samples_before_logging=1, tracking_uri=self.tracking_uri
        )
        self._system_monitor.start()

    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(k, v) for k, v in flatten(params).items()]
        for i in range(0, len(items), _MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + _MAX_PARAMS_PER_BATCH], synchronous=True)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, str(v)[:MAX_TAG_VAL_LENGTH]) for k, v in tags.items()]
        self.client.log_batch(self.run_id, tags=items, synchronous=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffered; handed to the async queue every `flush_every` steps' worth and on flush()/end()."""
        timestamp = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), timestamp, step) for k, v in metrics.items())
        if len(self._pending) >= self.flush_every * max(1, len(metrics)):
            self.flush()

    def flush(self) -> None:
        """Queue the buffered metrics (returns at once); raises the error of an earlier batch that failed."""
        self._raise_failed(wait_s=None)
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), _MAX_METRICS_PER_BATCH):
            ops = self.client.log_batch(self.run_id, metrics=pending[i : i + _MAX_METRICS_PER_BATCH], synchronous=False)
            self._in_flight.extend(getattr(ops, "_operation_futures", None) or [])

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait (at most `timeout_s`, default `drain_timeout_s`) until every queued batch is logged; raises if one
        failed or the time ran out."""
        self.flush()
        self._raise_failed(wait_s=self.drain_timeout_s if timeout_s is None else timeout_s)

    def _raise_failed(self, wait_s: float | None) -> None:
        if wait_s is not None and self._in_flight:
            _done, not_done = concurrent.futures.wait(self._in_flight, timeout=wait_s)
            if not_done:
                raise TimeoutError(f"{len(not_done)} metric batches still queued after {wait_s:.0f} s")
        still = []
        for future in self._in_flight:
            if not future.done():
                still.append(future)
            elif future.exception() is not None:
                self._in_flight = []
                raise future.exception()
        self._in_flight = still

    def log_dict(self, data: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, data, artifact_file)

    def log_table(self, columns: Mapping[str, list], artifact_file: str) -> None:
        """A table artifact (column name -> values), shown as a table in the MLflow UI."""
        self.client.log_table(self.run_id, data=dict(columns), artifact_file=artifact_file)

    def log_model(self, model: Any, tokenizer: Any, name: str = "model") -> str:
        """Log the weights + tokenizer (not the optimizer) as this run's MLflow model; returns its model URI.

        `model` is the unwrapped HF model, `tokenizer` a transformers tokenizer. (MLflow 3.17's
        local-checkpoint path form fails on transformers 5 pipelines, so the objects are passed.)
        """
        with _tracking_uri(self.tracking_uri):
            info = mlflow.transformers.log_model(
                transformers_model={"model": model, "tokenizer": tokenizer},
                name=name,
                task="text-generation",
                run_id=self.run_id,
                # explicit: inferring them imports optional packages (torchvision) that are not installed
                pip_requirements=[f"transformers=={_version('transformers')}", f"torch=={_version('torch')}"],
            )
        return info.model_uri

    def log_bytes(self, data: bytes, artifact_file: str) -> str:
        """`data` as the run artifact `artifact_file` (a PNG, say); returns `artifact_file`."""
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_bytes(data)
            parent = str(Path(artifact_file).parent)
            self.client.log_artifact(self.run_id, str(path), None if parent == "." else parent)
        return artifact_file

    def end(self, status: str = "FINISHED") -> None:
        try:
            self.drain()
        finally:
            if self._system_monitor is not None:
                self._system_monitor.finish()
                self._system_monitor = None
            self.client.set_terminated(self.run_id, status=status)


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI address of a run."""
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def get_or_create_experiment(client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created if missing; when another process creates it first, theirs."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name)
    except mlflow.exceptions.MlflowException:  # created concurrently by another invocation
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def start_job_run(
    job: JobConfig,
    *,
    model_config: Mapping[str, Any],
    tokenizer: Any,
    resumed_from_step: int,
    world_size: int,
    device: str,
) -> MlflowRun:
    """The MLflow run of one trainer invocation, with its params; the caller checks `job.mlflow_tracking_uri`.

    `tokenizer` is the project's loaded tokenizer (`name`, `hash`, `vocab_size`); `model_config` the
    model's config as a dict.
    """
    run = MlflowRun.start(
        job.mlflow_tracking_uri,
        job.experiment_name,
        run_name=job.mlflow_run_name,
        dagster_run_id=job.dagster_run_id,
        partitions=job.partitions,
        tags=run_tags(
            dagster_run_id=job.dagster_run_id,
            partition=",".join(job.partitions)[:MAX_TAG_VAL_LENGTH] or None,
            asset="deepseek_checkpoint",
            config_hash=config_hash(job.train.model_dump(mode="json")),
            topic=job.topic.name,
            preset=job.train.preset.name,
            resumed_from_step=resumed_from_step,
            gpu_metrics=gpu_metrics_source(device),
        ),
        system_metrics_interval_s=job.system_metrics_interval_s,
    )
    params = {
        "model": {k: v for k, v in model_config.items() if k not in _RUN_SPECIFIC_MODEL_KEYS},
        "train": job.train.model_dump(mode="json"),
        "tokenizer": {"name": tokenizer.name, "hash": tokenizer.hash, "vocab_size": tokenizer.vocab_size},
        "data": {"topic": job.topic.name, "partitions": len(job.partitions), "backlog_uri": job.backlog_uri},
        "world_size": world_size,
        "device": device,
        "global_batch_tokens": job.train.batch_size * job.topic.seq_len * world_size,
    }
    try:
        run.log_params(params)
    except Exception:
        # the caller gets no run to end: end it here (stopping its system-metrics thread), then re-raise
        with contextlib.suppress(Exception):
            run.end("FAILED")
        raise
    return run


def gpu_metrics_source(device: str) -> str:
    """Where the run's GPU system metrics come from: `nvidia-ml-py` (module `pynvml`, which MLflow's monitor uses
    when importable), `none` on a CPU, or `missing` (a warning: a GPU run without that package logs no GPU metrics).
    """
    if not device.startswith("cuda"):
        return "none"
    if importlib.util.find_spec("pynvml") is not None:
        return "nvidia-ml-py"
    log.warning("GPU run without nvidia-ml-py: MLflow logs no GPU metrics (pip install nvidia-ml-py)")
    return "missing"


EXPERT_LOAD_TABLE = "expert_load.json"


def split_expert_load(metrics: Mapping[str, float], step: int, table: dict[str, list]) -> dict[str, float]:
    """Step metrics minus the per-expert loads (`expert_load/<router>/e<i>`), which go to `table`'s columns (step,
    router, expert, load); each router's max violation stays a step metric. Thousands of experts stay one artifact."""
    summary: dict[str, float] = {}
    per_router: dict[str, list[float]] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "expert_load" and parts[2][:1] == "e" and parts[2][1:].isdigit():
            for column, cell in zip(("step", "router", "expert", "load"), (step, parts[1], int(parts[2][1:]), value)):
                table.setdefault(column, []).append(cell)
            per_router.setdefault(parts[1], []).append(value)
        else:
            summary[key] = value
    for router, loads in per_router.items():
        mean = sum(loads) / len(loads)
        summary[f"expert_load/{router}/max_violation"] = max(loads) / mean - 1.0 if mean > 0 else 0.0
    return summary
