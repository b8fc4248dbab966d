"""One trainer invocation, step by step: `run_job(JobConfig) -> TrainJobResult`.

Contract (every rank of a `torchrun` job calls `run_job`; rank 0 alone writes to S3, MLflow and Dagster):

1. continues from the checkpoint that `latest.json` under `job.checkpoint_prefix` points at, if any: the
   weights, optimizer, RNG and the Kafka position of every rank. Rank 0 reads and validates `latest.json`
   once and hands that reference to every rank; each node's local rank 0 downloads it into the node's own
   scratch directory. A checkpoint trained with another tokenizer raises `CheckpointMismatchError` before any step;
2. reads only the token blocks that are new since that position (bounded mode: up to the topic's end
   at start). A fetched batch that was not trained on is not consumed;
3. logs to MLflow when `job.mlflow_tracking_uri` is set: one run per invocation, created at the first
   step, ended FINISHED, or FAILED when training raises. MLflow is best effort: the first MLflow call that
   fails is logged as a warning and recorded as `mlflow_error`, MLflow is skipped for the rest of the
   invocation (except a last attempt to end its run) and training goes on. No checkpoint waits on MLflow;
4. saves an HF checkpoint + resume state to S3 (also every `train.checkpoint_every` steps) and moves
   `latest.json` to it last, with a conditional write on the `latest.json` this invocation read (or last
   wrote): if another invocation moved it, `CheckpointConflictError` and this checkpoint stays unreferenced.
   Each checkpoint `latest.json` moved to becomes a model version in MLflow's registry (lineage tags, alias
   `latest-checkpoint`; `tracking.py`). At the end: the run's inputs (Kafka offsets, shard manifests), the
   loss-curve PNG, then the weights as a logged model;
5. returns the `TrainJobResult` (with the loader's `dead_letters`, malformed messages skipped, summed over
   ranks) and, under dagster-pipes, reports it as the asset materialization.

No new blocks -> status "nothing_new": no MLflow run and no checkpoint.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline_project.common.metrics import prometheus as prom
from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.streaming.load.domain_source import make_loader
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project.streaming.load.preflight import describe_topic
from pipeline_project.streaming.tokenizer import TokenizerInfo, load_tokenizer
from pipeline_project.training import distributed
from pipeline_project.training.checkpoint.store import (
    CheckpointRef,
    LatestPointer,
    download_prefix,
    read_latest,
    s3_client,
    save_checkpoint,
    upload_checkpoint,
)
from pipeline_project.training.config import TrainConfig
from pipeline_project.training.errors import CheckpointMismatchError
from pipeline_project.training.job import JobConfig, TrainJobResult
from pipeline_project.training.positions import offsets_consumed, positions
from pipeline_project.training.reporting import Reporter, pipes_if_present
from pipeline_project.training.resume import TrainingState, build_training_state, make_resume_state
from pipeline_project.training.step_log import StepLog, gather_steps, write_steps
from pipeline_project.training.tracking.callback import Progress
from pipeline_project.training.tracking.lineage import model_version_url
from pipeline_project.training.tracking.mixture import MixtureReport, final_report
from pipeline_project.training.trainer import TrainResult, resolve_device, train


def run_job(job: JobConfig) -> TrainJobResult:
    t_start = time.perf_counter()
    dist_info = distributed.init_distributed()
    prom.serve_metrics(job.metrics_port, dist_info.local_rank)
    device = resolve_device(job.train, dist_info.local_rank)
    with pipes_if_present(dist_info.is_main) as pipes:
        inv = _open_invocation(job, dist_info, device, Reporter(pipes))
        resume = _open_resume_point(inv)
        loader = _build_loader(inv, resume.state)
        start_states = distributed.all_gather_objects(loader.state_dict())
        progress = Progress(inv, resume.state, start_states, mixture=MixtureReport.of(loader))
        status = "FAILED"
        try:
            result = _train(inv, resume.state, loader, progress)
            end_states = distributed.all_gather_objects(result.data_state)
            dead_letters = sum(distributed.all_gather_objects(dead_letter_count(loader)))
            ref = _save_final(inv, resume.state, result, progress)
            final = {"dead_letters": float(dead_letters), **final_report(progress, start_states, end_states)}
            progress.log_final(final, step=result.end_step, end_states=end_states)
            model_uri = _log_model(inv, resume.state, progress)
            status = "FINISHED"
        finally:
            loader.close()
            progress.end(status)
        job_result = _result(
            inv,
            resume,
            progress,
            result,
            start_states=start_states,
            end_states=end_states,
            checkpoint=ref,
            model_uri=model_uri,
            dead_letters=dead_letters,
            wall_s=time.perf_counter() - t_start,
        )
        inv.report.info(job_result.message)
        inv.report.materialize(job_result)
    _remove_scratch(inv)
    return job_result


@dataclass
class _Lineage:
    """Where this invocation stands in the checkpoint lineage: the `latest.json` it read or last wrote."""

    pointer: LatestPointer = field(default_factory=lambda: LatestPointer(ref=None, etag=None))
    last_saved: CheckpointRef | None = None  # the newest checkpoint this invocation wrote
    steps: StepLog | None = None  # the blocks of the steps not yet in a checkpoint


@dataclass(frozen=True)
class _Invocation:
    """What every step of one invocation shares."""

    job: JobConfig
    dist: distributed.DistInfo
    device: torch.device
    report: Reporter
    s3: Any
    tokenizer: TokenizerInfo
    work_dir: Path
    lineage: _Lineage = field(default_factory=_Lineage)

    @property
    def cfg(self) -> TrainConfig:
        return self.job.train


@dataclass(frozen=True)
class _ResumePoint:
    previous: CheckpointRef | None  # None: a fresh model from the preset
    state: TrainingState


def _open_invocation(
    job: JobConfig, dist_info: distributed.DistInfo, device: torch.device, report: Reporter
) -> _Invocation:
    s3 = s3_client(job.settings())
    tokenizer = load_tokenizer(job.tokenizer)
    work_dir = distributed.node_scratch_dir(job.work_dir, dist_info)  # the ranks of a node share their node's
    work_dir.mkdir(parents=True, exist_ok=True)
    return _Invocation(job, dist_info, device, report, s3, tokenizer, work_dir)


def _open_resume_point(inv: _Invocation) -> _ResumePoint:
    """The latest checkpoint's model, optimizer, RNG and data position, or a fresh model when there is none."""
    job = inv.job
    # read once, on rank 0: every rank continues from the same checkpoint, and rank 0 (which alone writes
    # latest.json) compares its conditional write against this very read
    inv.lineage.pointer = distributed.run_on_main(lambda: read_latest(inv.s3, job.bucket, job.checkpoint_prefix))
    previous = inv.lineage.pointer.ref
    resume_dir = None
    if previous is not None:
        # the node's own name in it, so nodes that share a job.work_dir volume never write the same files
        resume_dir = inv.work_dir / f"resume-step-{previous.step}-rank{distributed.node_leader(inv.dist)}"
        step_prefix = key_in_bucket(previous.uri, job.bucket)
        # once per node, by its local rank 0; a failure there stops every rank
        distributed.all_succeed(
            (lambda: download_prefix(inv.s3, job.bucket, step_prefix, resume_dir)) if inv.dist.local_rank == 0 else None
        )
        inv.report.info(f"continuing from {previous.uri} (step {previous.step})")
    state = build_training_state(inv.cfg, inv.tokenizer.vocab_size, inv.device, checkpoint_dir=resume_dir)
    saved_hash = state.meta.get("tokenizer_hash")
    if saved_hash and saved_hash != inv.tokenizer.hash:
        raise CheckpointMismatchError(
            f"checkpoint {previous.uri} was trained with tokenizer {saved_hash[:12]}, "
            f"this job uses {inv.tokenizer.name} ({inv.tokenizer.hash[:12]})"
        )
    return _ResumePoint(previous, state)


def _build_loader(inv: _Invocation, state: TrainingState) -> KafkaBlockLoader:
    """This rank's Kafka loader (bounded mode; by domain with `train.mixture`), where the checkpoint's stopped."""
    cfg = inv.cfg
    loader = make_loader(
        LoaderConfig(
            kafka=inv.job.kafka,
            topic=inv.job.topic.name,
            partitions=agreed_partition_count(inv.job),
            seq_len=inv.job.topic.seq_len,
            batch_size=cfg.batch_size,
            rank=inv.dist.rank,
            world_size=inv.dist.world_size,
            num_workers=inv.job.loader_workers,
            mode="bounded",
            idle_timeout_s=inv.job.loader_idle_timeout_s,
            stall_timeout_s=inv.job.loader_stall_timeout_s,
            seed=cfg.seed,
            expected_tokenizer_hash=inv.tokenizer.hash,
            device="cpu",
            mixture=cfg.mixture,
            trace=True,  # the blocks of every step, for `step_log`
        )
    )
    if state.data_states:
        loader.load_state_dict(state.data_states)
    return loader


def agreed_partition_count(job: JobConfig, describe=describe_topic) -> int:
    """The topic's partition count, read once by rank 0 and handed to every rank (a collective): ranks that listed
    it apart could see a topic grown in between, lay out different tables, read messages twice and save a mixed
    layout no resume accepts."""
    return distributed.run_on_main(lambda: len(describe(job.kafka.make_admin(), job.topic.name, 30.0)[0]))


def dead_letter_count(loader: Any) -> int:
    """Malformed messages this rank's loader skipped (0 for a loader that does not count them)."""
    return int(loader.metrics().get("dead_letters", 0) or 0)


def _train(inv: _Invocation, state: TrainingState, loader: KafkaBlockLoader, progress: Progress) -> TrainResult:
    cfg = inv.cfg
    tokens_per_step = cfg.batch_size * inv.job.topic.seq_len * inv.dist.world_size

    def mid_run_checkpoint(step: int, data_state: Any) -> None:
        _save_checkpoint(inv, state, step, (step - state.step) * tokens_per_step, data_state, progress)

    inv.lineage.steps = StepLog(loader, state.step)
    return train(
        cfg,
        inv.lineage.steps,
        model=state.model,
        optimizer=state.optimizer,
        start_step=state.step,
        on_step=progress,
        lag_fn=lambda: _loader_lag(inv, loader),
        data_state_fn=loader.state_dict,
        on_checkpoint=mid_run_checkpoint,
    )


def _loader_lag(inv: _Invocation, loader: KafkaBlockLoader) -> int:
    """This rank's total consumer lag; exports the loader's figures (lag per partition, data wait) on the way."""
    figures = loader.metrics()
    prom.record_loader(figures, topic=inv.job.topic.name, rank=inv.dist.rank)
    return figures["lag_total"]


def _save_checkpoint(
    inv: _Invocation, state: TrainingState, step: int, tokens: int, data_state: Any, progress: Progress
) -> CheckpointRef | None:
    """Gather every rank's data position (a collective: every rank calls), then rank 0 saves, uploads and
    registers the checkpoint in MLflow's Model Registry."""
    data_states = distributed.all_gather_objects(data_state)
    steps = gather_steps(inv.lineage.steps, step)
    if not inv.dist.is_main:
        return None
    local = inv.work_dir / f"step-{step}"
    meta = {
        "train": inv.cfg.model_dump(mode="json"),
        "tokenizer": inv.tokenizer.name,
        "tokenizer_hash": inv.tokenizer.hash,
        "topic": inv.job.topic.name,
        "dagster_run_id": inv.job.dagster_run_id,
    }
    save_checkpoint(
        local,
        model=state.model,
        tokenizer=inv.tokenizer,
        resume=make_resume_state(state, step, state.tokens_seen + tokens, data_states, meta=meta),
    )
    lineage = inv.lineage
    previous = lineage.pointer.ref.uri if lineage.pointer.ref else None
    write_steps(
        local,
        steps,
        step=step,
        previous=previous,
        topic=inv.job.topic.name,
        seq_len=inv.job.topic.seq_len,
        batch_size=inv.cfg.batch_size,
    )
    try:
        lineage.pointer = upload_checkpoint(
            inv.s3, inv.job.bucket, inv.job.checkpoint_prefix, step, local, expected=lineage.pointer
        )
    finally:
        shutil.rmtree(local, ignore_errors=True)  # uploaded (or refused): the local copy is not needed
    lineage.last_saved = lineage.pointer.ref
    inv.report.info(f"checkpoint step {step} -> {lineage.last_saved.uri}")
    progress.register_checkpoint(lineage.last_saved, data_states)
    return lineage.last_saved


def _save_final(
    inv: _Invocation, state: TrainingState, result: TrainResult, progress: Progress
) -> CheckpointRef | None:
    """The checkpoint after the last trained step; none when nothing was trained. When the loop's own
    checkpoint fell on the last step, that one is it (same step, same data position). Every rank takes
    the same branch: `_save_checkpoint` is a collective."""
    if result.steps == 0:
        return None
    every = inv.cfg.checkpoint_every
    if every and result.end_step % every == 0:
        return inv.lineage.last_saved  # rank 0's; None on the other ranks, as _save_checkpoint answers there
    return _save_checkpoint(inv, state, result.end_step, result.tokens, result.data_state, progress)


def _log_model(inv: _Invocation, state: TrainingState, progress: Progress) -> str | None:
    if progress.mlflow_run is None or not inv.job.log_model_to_mlflow or not inv.dist.is_main:
        return None
    return progress.mlflow("log the model", progress.mlflow_run.log_model, state.model, inv.tokenizer.tokenizer)


def _result(
    inv: _Invocation,
    resume: _ResumePoint,
    progress: Progress,
    result: TrainResult,
    *,
    start_states: list[Any],
    end_states: list[Any],
    checkpoint: CheckpointRef | None,
    model_uri: str | None,
    dead_letters: int,
    wall_s: float,
) -> TrainJobResult:
    """What the invocation did, from the loop's result and every rank's data position before and after."""
    trained = result.steps > 0
    rates = [m.tokens_per_s for m in progress.metrics]
    waits = [m.data_wait_fraction for m in progress.metrics]
    run = progress.mlflow_run
    return TrainJobResult(
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
        checkpoint_uri=checkpoint.uri if checkpoint else None,
        hf_uri=checkpoint.hf_uri if checkpoint else None,
        resumed_from=resume.previous.uri if resume.previous else None,
        mlflow_run_id=run.run_id if run else None,
        mlflow_run_url=run.url if run else None,
        mlflow_model_uri=model_uri,
        world_size=inv.dist.world_size,
        device=str(inv.device),
        tokens_per_s=sum(rates) / len(rates) if rates else None,
        data_wait_fraction=sum(waits) / len(waits) if waits else None,
        stop_reason=result.stop_reason,
        wall_s=wall_s,
        topic=inv.job.topic.name,
        backlog_batches=len(inv.job.partitions),
        dead_letters=dead_letters,
        mlflow_error=progress.mlflow_error,
        registered_model=progress.registered_model if progress.model_version else None,
        model_version=progress.model_version,
        model_version_url=(
            model_version_url(inv.job.mlflow_tracking_uri, progress.registered_model, progress.model_version)
            if progress.model_version
            else None
        ),
        loss_curve_url=progress.loss_curve_url,
    )


def _remove_scratch(inv: _Invocation) -> None:
    """Each node's local rank 0 removes the node's temp dir (its ranks read from it only before training)."""
    if inv.dist.local_rank == 0 and not inv.job.work_dir:
        shutil.rmtree(inv.work_dir, ignore_errors=True)
