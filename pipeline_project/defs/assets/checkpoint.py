"""`deepseek_checkpoint`: a DeepseekV3ForCausalLM trained on the topic, out of process via dagster-pipes.

The asset builds the trainer's `JobConfig` from the resources (`TrainerResource.job_config`) and runs the
trainer (`TrainerResource.run`); the materialization's metadata is what the trainer reports. Its checks
read that metadata: `loss_is_finite`, and the blocking `checkpoint_reloads` (the S3 checkpoint loads with
`AutoModelForCausalLM` and generates). torch and transformers are imported only inside the check.

One training at a time, three layers deep:
- the run queue: training runs carry `pipeline/kind: training`, limited to 1 by the instance's
  `concurrency.runs.tag_concurrency_limits`, and the trigger sensor requests none while one is in flight;
- the pool: the step is in pool `training` (limit 1 from `concurrency.pools.default_limit`), so a run
  launched some other way (the UI, no tag) waits for the slot;
- the asset's own guard, on any instance, configured or not: the step refuses to start while an older
  training run is executing, and the trainer moves `latest.json` only with a conditional write, so of two
  invocations that trained from the same checkpoint one wins and the other fails with
  `CheckpointConflictError`, its checkpoint unreferenced.
"""

import math
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.assets.backlog import (
    CHECKPOINT_KEY,
    BacklogStore,
    HeadSource,
    default_store,
    load_training_state,
    open_store,
    save_training_state,
    untrained_backlog,
)
from pipeline_project.defs.assets.backlog.lineage import lineage_head
from pipeline_project.defs.assets.token_blocks import token_blocks
from pipeline_project.defs.partitions import (
    RUN_KIND_TAG,
    TRAINING_POOL,
    TRAINING_RUN_TAGS,
    latest_materialization_metadata,
)
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.resources.mlflow import MlflowResource
from pipeline_project.defs.resources.trainer import TrainerResource

EXECUTING = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
IN_FLIGHT = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    *EXECUTING,
]


def untrained_topic_batches(
    instance: dg.DagsterInstance, topic: str, store: BacklogStore | None = None, lineage: HeadSource | None = None
) -> dict[str, dict]:
    """Batch -> offset ranges of the batches of `topic` (or of no recorded topic) that the checkpoint head has not
    wholly trained: what this run can read. The count is carried over from the previous run's (`assets.backlog`,
    its scope in `store`), so it reads the materializations since then, not every batch ever."""
    state = load_training_state(instance)
    store = store if store is not None else default_store(instance)
    untrained_backlog(instance, state, store=store, lineage=lineage)
    save_training_state(instance, state)
    return store.batches(state.scope, topic)


def is_training_run(run: dg.DagsterRun) -> bool:
    """A run that trains: tagged `pipeline/kind: training`, or one whose selection holds the checkpoint."""
    return run.tags.get(RUN_KIND_TAG) == TRAINING_RUN_TAGS[RUN_KIND_TAG] or CHECKPOINT_KEY in (
        run.asset_selection or ()
    )


def training_runs(
    instance: dg.DagsterInstance, statuses: list[dg.DagsterRunStatus], exclude_run_id: str | None = None
) -> list[dg.RunRecord]:
    """The training runs in `statuses` (oldest first), but `exclude_run_id`."""
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=statuses), ascending=True)
    return [r for r in records if r.dagster_run.run_id != exclude_run_id and is_training_run(r.dagster_run)]


def refuse_if_another_run_trains(instance: dg.DagsterInstance, run_id: str) -> None:
    """Raise `dg.Failure` when a training run that started before this one is still executing.

    Of two runs that start at once, each sees the other; the one that started later (start time, then run
    id) refuses, so exactly one goes on. The conditional write of `latest.json` backs this up.
    """
    mine = instance.get_run_record_by_id(run_id)
    my_start = (mine.start_time if mine else None) or float("inf")
    for other in training_runs(instance, EXECUTING, exclude_run_id=run_id):
        started = other.start_time
        if started is not None and (started, other.dagster_run.run_id) < (my_start, run_id):
            raise dg.Failure(
                description=f"training run {other.dagster_run.run_id} is executing "
                f"({other.dagster_run.status.value}); only one run trains at a time. This run trains nothing.",
                metadata={"running": other.dagster_run.run_id},
                allow_retries=False,
            )


@contextmanager
def _backlog_store(kafka: KafkaResource, instance: dg.DagsterInstance) -> Iterator[BacklogStore]:
    """Training's backlog store: in the ledger index's database (the stand-in beside the instance without one)."""
    store = open_store(kafka.ledger_index_url, getattr(instance, "root_directory", None))
    try:
        yield store
    finally:
        store.close()


class TrainingRunConfig(dg.Config):
    """One training run's own bounds, set per run (the trigger sensor sets them; the UI's launchpad may)."""

    max_steps: int | None = None
    """Train at most this many steps in this run (the trainer resource's `max_steps`, when set, still caps it);
    None or 0: no bound of the run's own. The checkpoint trigger sets $PIPELINE_TRIGGER_MAX_STEPS here."""


@dg.asset(
    deps=[token_blocks],
    code_version="1",  # bump when a change makes this asset write something else for the same input
    group_name="training",
    kinds={"pytorch", "mlflow"},
    pool=TRAINING_POOL,
    description="DeepSeek-V3-architecture (MLA + MoE) checkpoint trained on the topic's token blocks. Each "
    "materialization continues from the previous checkpoint and the Kafka offsets saved in it, so new data is "
    "trained on once. HF format (safetensors + tokenizer) and resume state in S3; metrics and weights in MLflow.",
)
def deepseek_checkpoint(
    context: dg.AssetExecutionContext,
    config: TrainingRunConfig,
    s3: S3Resource,
    kafka: KafkaResource,
    layout: PipelineLayout,
    mlflow: MlflowResource,
    trainer: TrainerResource,
):
    from pipeline_project.cleaning.output.publish import manifest_key

    refuse_if_another_run_trains(context.instance, context.run.run_id)
    with _backlog_store(kafka, context.instance) as store:
        lineage = lineage_head(s3.get_client(), layout.bucket, f"{layout.checkpoints_prefix}{trainer.run_name}")
        batches = untrained_topic_batches(context.instance, layout.topic.name, store, lineage)
    job = trainer.job_config(
        kafka=kafka.settings(),
        topic=layout.topic_spec,
        s3_endpoint=s3.endpoint_url,
        bucket=layout.bucket,
        checkpoint_prefix=f"{layout.checkpoints_prefix}{trainer.run_name}",
        mlflow_tracking_uri=mlflow.tracking_uri,
        dagster_run_id=context.run.run_id,
        partitions=list(batches),
        shard_manifests={b: f"s3://{layout.bucket}/{manifest_key(layout.shard_dir(b))}" for b in batches},
        batch_offsets=batches,
        max_steps=config.max_steps,
    )
    context.log.info(f"training on topic {layout.topic.name} ({len(batches)} batches not yet wholly trained)")
    return trainer.run(context, job)


@dg.asset_check(asset=deepseek_checkpoint, description="The final training loss is a finite number.")
def loss_is_finite(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    meta = latest_materialization_metadata(context.instance, deepseek_checkpoint.key)
    loss = meta.get("final_loss")
    ok = meta.get("steps", 0) == 0 or (isinstance(loss, (int, float)) and math.isfinite(loss))
    return dg.AssetCheckResult(passed=bool(ok), metadata={"final_loss": str(loss), "steps": meta.get("steps", 0)})


@dg.asset_check(
    asset=deepseek_checkpoint,
    blocking=True,
    description="The checkpoint in S3 reloads with AutoModelForCausalLM and generates tokens. Its URI must be a step "
    "folder of the trainer's own lineage, and every key must land inside the check's temp dir, else it fails.",
)
def checkpoint_reloads(
    context: dg.AssetCheckExecutionContext, s3: S3Resource, layout: PipelineLayout, trainer: TrainerResource
) -> dg.AssetCheckResult:
    import tempfile

    from pipeline_project.training.checkpoint.ref import check_step_uri
    from pipeline_project.training.checkpoint.verify import reload_and_generate
    from pipeline_project.training.errors import InvalidCheckpointError

    meta = latest_materialization_metadata(context.instance, deepseek_checkpoint.key)
    uri = meta.get("checkpoint_uri")
    if not uri:
        return dg.AssetCheckResult(passed=meta.get("steps", 0) == 0, metadata={"reason": "no checkpoint written"})
    try:  # this process holds every secret: follow no URI and write no key outside the lineage and the temp dir
        check_step_uri(uri, layout.bucket, f"{layout.checkpoints_prefix}{trainer.run_name}")
        with tempfile.TemporaryDirectory() as tmp:
            generated = reload_and_generate(s3.get_client(), uri, tmp, new_tokens=4)
    except InvalidCheckpointError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"checkpoint_uri": str(uri), "error": str(exc)})
    return dg.AssetCheckResult(
        passed=len(generated) == 4, metadata={"checkpoint_uri": uri, "generated_token_ids": generated}
    )
