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
   `latest-checkpoint`; `tracking.py`). A sharded model (`train.parallelism: fsdp`) checkpoints as every rank's
   DCP shard plus the whole model in `hf/` (`saving.py`, `training/sharding.py`). At the end: the run's inputs (Kafka offsets, shard manifests), the
   loss-curve PNG, then the weights as a logged model;
5. returns the `TrainJobResult` (with the loader's `dead_letters`, malformed messages skipped, summed over
   ranks) and, under dagster-pipes, reports it as the asset materialization.

No new blocks -> status "nothing_new": no MLflow run and no checkpoint.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from pipeline_project.common.metrics import prometheus as prom
from pipeline_project.settings import DistEnv
from pipeline_project.streaming.load.domain_source import make_loader
from pipeline_project.streaming.load.loader import KafkaBlockLoader, LoaderConfig
from pipeline_project.streaming.load.preflight import describe_topic
from pipeline_project.training import distributed
from pipeline_project.training.checkpoint.store import CheckpointRef
from pipeline_project.training.devices import resolve_device
from pipeline_project.training.job import JobConfig, TrainJobResult
from pipeline_project.training.loss_summary import summarize_losses
from pipeline_project.training.positions import offsets_consumed, positions
from pipeline_project.training.reporting import Reporter, pipes_if_present
from pipeline_project.training.resume import TrainingState
from pipeline_project.training.run.invocation import Invocation, ResumePoint, open_invocation, open_resume_point
from pipeline_project.training.run.saving import log_model, save_final, save_step
from pipeline_project.training.step_log import StepLog
from pipeline_project.training.tracking.callback import Progress
from pipeline_project.training.tracking.lineage import model_version_url
from pipeline_project.training.tracking.mixture import MixtureReport, final_report
from pipeline_project.training.trainer import TrainResult, train


def run_job(job: JobConfig) -> TrainJobResult:
    t_start = time.perf_counter()
    # before joining the group: a GPU launch on a node whose torch cannot use CUDA fails in a second, on every rank
    device = resolve_device(job.train, DistEnv.from_env().local_rank)
    dist_info = distributed.init_distributed()
    prom.serve_metrics(job.metrics_port, dist_info.local_rank)
    with pipes_if_present(dist_info.is_main) as pipes:
        inv = open_invocation(job, dist_info, device, Reporter(pipes))
        resume = open_resume_point(inv)
        loader = _build_loader(inv, resume.state)
        start_states = distributed.all_gather_objects(loader.state_dict())
        progress = Progress(inv, resume.state, start_states, mixture=MixtureReport.of(loader))
        status = "FAILED"
        try:
            result = _train(inv, resume.state, loader, progress)
            end_states = distributed.all_gather_objects(result.data_state)
            dead_letters = sum(distributed.all_gather_objects(dead_letter_count(loader)))
            retracted = sum(distributed.all_gather_objects(int(getattr(loader, "retracted_total", 0))))
            ref = save_final(inv, resume.state, result, progress)
            final = {"dead_letters": float(dead_letters), **final_report(progress, start_states, end_states)}
            progress.log_final(final, step=result.end_step, end_states=end_states)
            model_uri = log_model(inv, resume.state, progress)
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
            loader_counts={"dead_letters": dead_letters, "retracted_blocks": retracted},
            wall_s=time.perf_counter() - t_start,
        )
        inv.report.info(job_result.message)
        inv.report.materialize(job_result)
    remove_scratch(inv)
    return job_result


def _build_loader(inv: Invocation, state: TrainingState) -> KafkaBlockLoader:
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


def _train(inv: Invocation, state: TrainingState, loader: KafkaBlockLoader, progress: Progress) -> TrainResult:
    cfg = inv.cfg
    tokens_per_step = cfg.batch_size * inv.job.topic.seq_len * inv.dist.world_size

    def mid_run_checkpoint(step: int, data_state: Any) -> None:
        save_step(inv, state, step, (step - state.step) * tokens_per_step, data_state, progress)

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


def _loader_lag(inv: Invocation, loader: KafkaBlockLoader) -> int:
    """This rank's total consumer lag; exports the loader's figures (lag per partition, data wait) on the way."""
    figures = loader.metrics()
    prom.record_loader(figures, topic=inv.job.topic.name, rank=inv.dist.rank)
    return figures["lag_total"]


def _result(
    inv: Invocation,
    resume: ResumePoint,
    progress: Progress,
    result: TrainResult,
    *,
    start_states: list[Any],
    end_states: list[Any],
    checkpoint: CheckpointRef | None,
    model_uri: str | None,
    loader_counts: dict[str, int],
    wall_s: float,
) -> TrainJobResult:
    """What the invocation did, from the loop's result and every rank's data position before and after;
    `loader_counts`: what the ranks' loaders passed over (`dead_letters`, `retracted_blocks`)."""
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
        **loader_counts,
        mlflow_error=progress.mlflow_error,
        registered_model=progress.registered_model if progress.model_version else None,
        model_version=progress.model_version,
        model_version_url=(
            model_version_url(inv.job.mlflow_tracking_uri, progress.registered_model, progress.model_version)
            if progress.model_version
            else None
        ),
        loss_curve_url=progress.loss_curve_url,
        loss=summarize_losses(result.losses),
    )


def remove_scratch(inv: Invocation) -> None:
    """Each node's local rank 0 removes the node's temp dir (its ranks read from it only before training)."""
    if inv.dist.local_rank == 0 and not inv.job.work_dir:
        shutil.rmtree(inv.work_dir, ignore_errors=True)
