"""Checkpoints of a running invocation: every rank's data position gathered, a sharded model's shards written and
uploaded by every rank into one step folder, then rank 0 saves `hf/` and `resume/`, uploads them and moves
`latest.json` (`checkpoint/store.py`); and the final weights as the MLflow run's model."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipeline_project.training import distributed
from pipeline_project.training.checkpoint.store import (
    RESUME_DIR,
    CheckpointRef,
    new_step_prefix,
    save_checkpoint,
    upload_checkpoint,
    upload_files,
)
from pipeline_project.training.resume import TrainingState, make_resume_state
from pipeline_project.training.run.invocation import Invocation
from pipeline_project.training.sharding import dcp_dir, full_model_state, is_sharded, save_sharded, unsharded_copy
from pipeline_project.training.step_log import gather_step_records, write_steps
from pipeline_project.training.tracking.callback import Progress
from pipeline_project.training.trainer import TrainResult


def save_step(
    inv: Invocation, state: TrainingState, step: int, tokens: int, data_state: Any, progress: Progress
) -> CheckpointRef | None:
    """Gather every rank's data position (a collective: every rank calls), then rank 0 saves, uploads and
    registers the checkpoint in MLflow's Model Registry. A sharded model's ranks first write and upload their
    shards (`save_shards`)."""
    data_states = distributed.all_gather_objects(data_state)
    steps, retracted = gather_step_records(inv.lineage.steps, step)
    local = inv.work_dir / f"step-{step}-node{distributed.node_leader(inv.dist)}"
    shards = save_shards(inv, state, step, local) if is_sharded(state.model) else None
    if not inv.dist.is_main:
        return None
    meta = {
        "train": inv.cfg.model_dump(mode="json"),
        "tokenizer": inv.tokenizer.name,
        "tokenizer_hash": inv.tokenizer.hash,
        "topic": inv.job.topic.name,
        "dagster_run_id": inv.job.dagster_run_id,
        "loss": progress.loss_upto(step),
    }
    save_checkpoint(
        local,
        model=state.model,
        tokenizer=inv.tokenizer,
        resume=make_resume_state(state, step, state.tokens_seen + tokens, data_states, meta=meta),
        weights=shards.weights if shards else None,
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
        retracted=retracted,
    )
    try:
        lineage.pointer = upload_checkpoint(
            inv.s3,
            inv.job.bucket,
            inv.job.checkpoint_prefix,
            step,
            local,
            expected=lineage.pointer,
            step_prefix=shards.step_prefix if shards else None,
            uploaded=shards.keys if shards else (),
        )
    finally:
        shutil.rmtree(local, ignore_errors=True)  # uploaded (or refused): the local copy is not needed
    lineage.last_saved = lineage.pointer.ref
    inv.report.info(f"checkpoint step {step} -> {lineage.last_saved.uri}")
    progress.register_checkpoint(lineage.last_saved, data_states)
    return lineage.last_saved


@dataclass(frozen=True)
class Shards:
    weights: dict[str, torch.Tensor]  # the whole model on rank 0 (for hf/); {} on the other ranks
    step_prefix: str  # the step folder every rank uploaded its shards to
    keys: tuple[str, ...]  # every rank's uploaded shard files


def save_shards(inv: Invocation, state: TrainingState, step: int, local: Path) -> Shards:
    """Every rank writes its DCP shard into its node's `local` and uploads it to one step folder that rank 0
    names (collectives: every rank calls). Then each node's local rank 0 removes the shards it no longer needs."""
    weights = full_model_state(state.model)
    mine = save_sharded(state.model, state.optimizer, local / RESUME_DIR)
    step_prefix = distributed.run_on_main(lambda: new_step_prefix(inv.job.checkpoint_prefix, step))
    keys: list[str] = []
    distributed.all_succeed(lambda: keys.extend(upload_files(inv.s3, inv.job.bucket, step_prefix, local, mine)))
    uploaded = tuple(key for rank_keys in distributed.all_gather_objects(keys) for key in rank_keys)
    if inv.dist.local_rank == 0:
        shutil.rmtree(local if not inv.dist.is_main else dcp_dir(local / RESUME_DIR), ignore_errors=True)
    return Shards(weights, step_prefix, uploaded)


def save_final(inv: Invocation, state: TrainingState, result: TrainResult, progress: Progress) -> CheckpointRef | None:
    """The checkpoint after the last trained step; none when nothing was trained. When the loop's own
    checkpoint fell on the last step, that one is it (same step, same data position). Every rank takes
    the same branch: `save_step` is a collective."""
    if result.steps == 0:
        return None
    every = inv.cfg.checkpoint_every
    if every and result.end_step % every == 0:
        return inv.lineage.last_saved  # rank 0's; None on the other ranks, as save_step answers there
    return save_step(inv, state, result.end_step, result.tokens, result.data_state, progress)


def log_model(inv: Invocation, state: TrainingState, progress: Progress) -> str | None:
    """The final weights as the MLflow run's model, by rank 0. A sharded model is gathered first (a collective:
    every rank calls, and rank 0 tells the others whether it logs at all)."""
    wanted = inv.dist.is_main and progress.mlflow_run is not None and inv.job.log_model_to_mlflow
    model = state.model
    if is_sharded(model):
        if not distributed.run_on_main(lambda: wanted):
            return None
        weights = full_model_state(model)
        model = unsharded_copy(model, weights) if wanted else model
    if not wanted:
        return None
    return progress.mlflow("log the model", progress.mlflow_run.log_model, model, inv.tokenizer.tokenizer)
