"""One trainer invocation's shared parts (`Invocation`) and where it starts (`open_resume_point`): the checkpoint
that `latest.json` names, read once by rank 0 and downloaded once per node, or a fresh model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.streaming.tokenizer import TokenizerInfo, load_tokenizer
from pipeline_project.training import distributed
from pipeline_project.training.checkpoint.store import (
    CheckpointRef,
    LatestPointer,
    download_prefix,
    read_latest,
    s3_client,
)
from pipeline_project.training.config import TrainConfig
from pipeline_project.training.errors import CheckpointMismatchError
from pipeline_project.training.job import JobConfig
from pipeline_project.training.reporting import Reporter
from pipeline_project.training.resume import TrainingState, build_training_state
from pipeline_project.training.step_log import StepLog


@dataclass
class Lineage:
    """Where this invocation stands in the checkpoint lineage: the `latest.json` it read or last wrote."""

    pointer: LatestPointer = field(default_factory=lambda: LatestPointer(ref=None, etag=None))
    last_saved: CheckpointRef | None = None  # the newest checkpoint this invocation wrote
    steps: StepLog | None = None  # the blocks of the steps not yet in a checkpoint


@dataclass(frozen=True)
class Invocation:
    """What every step of one invocation shares."""

    job: JobConfig
    dist: distributed.DistInfo
    device: torch.device
    report: Reporter
    s3: Any
    tokenizer: TokenizerInfo
    work_dir: Path
    lineage: Lineage = field(default_factory=Lineage)

    @property
    def cfg(self) -> TrainConfig:
        return self.job.train


@dataclass(frozen=True)
class ResumePoint:
    previous: CheckpointRef | None  # None: a fresh model from the preset
    state: TrainingState


def open_invocation(
    job: JobConfig, dist_info: distributed.DistInfo, device: torch.device, report: Reporter
) -> Invocation:
    s3 = s3_client(job.settings())
    tokenizer = load_tokenizer(job.tokenizer)
    work_dir = distributed.node_scratch_dir(job.work_dir, dist_info)  # the ranks of a node share their node's
    work_dir.mkdir(parents=True, exist_ok=True)
    return Invocation(job, dist_info, device, report, s3, tokenizer, work_dir)


def open_resume_point(inv: Invocation) -> ResumePoint:
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
    shard = inv.cfg.parallelism == "fsdp" and inv.dist.enabled
    state = build_training_state(inv.cfg, inv.tokenizer.vocab_size, inv.device, checkpoint_dir=resume_dir, shard=shard)
    saved_hash = state.meta.get("tokenizer_hash")
    if saved_hash and saved_hash != inv.tokenizer.hash:
        raise CheckpointMismatchError(
            f"checkpoint {previous.uri} was trained with tokenizer {saved_hash[:12]}, "
            f"this job uses {inv.tokenizer.name} ({inv.tokenizer.hash[:12]})"
        )
    return ResumePoint(previous, state)
