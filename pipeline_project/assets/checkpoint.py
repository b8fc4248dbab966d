"""`deepseek_checkpoint`: a DeepseekV3ForCausalLM trained on the topic, out of process via dagster-pipes.

The asset builds the trainer's `JobConfig` from the resources (`TrainerResource.job_config`) and runs the
trainer (`TrainerResource.run`); the materialization's metadata is what the trainer reports. Its checks
read that metadata: `loss_is_finite`, and the blocking `checkpoint_reloads` (the S3 checkpoint loads with
`AutoModelForCausalLM` and generates). torch and transformers are imported only inside the check.
"""

import math

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.assets.partitions import latest_materialization_metadata
from pipeline_project.assets.token_blocks import token_blocks
from pipeline_project.resources.kafka import KafkaResource
from pipeline_project.resources.layout import PipelineLayout
from pipeline_project.resources.mlflow import MlflowResource
from pipeline_project.resources.trainer import TrainerResource


def _materialized_batches(instance: dg.DagsterInstance) -> list[str]:
    return sorted(instance.get_materialized_partitions(token_blocks.key))


@dg.asset(
    deps=[token_blocks],
    group_name="training",
    kinds={"pytorch", "mlflow"},
    description="DeepSeek-V3-architecture (MLA + MoE) checkpoint trained on the topic's token blocks. Each "
    "materialization continues from the previous checkpoint and the Kafka offsets saved in it, so new data is "
    "trained on once. HF format (safetensors + tokenizer) and resume state in S3; metrics and weights in MLflow.",
)
def deepseek_checkpoint(
    context: dg.AssetExecutionContext,
    s3: S3Resource,
    kafka: KafkaResource,
    layout: PipelineLayout,
    mlflow: MlflowResource,
    trainer: TrainerResource,
):
    batches = _materialized_batches(context.instance)
    job = trainer.job_config(
        kafka=kafka.settings(),
        topic=layout.topic,
        seq_len=layout.seq_len,
        s3_endpoint=s3.endpoint_url,
        bucket=layout.bucket,
        checkpoint_prefix=f"{layout.checkpoints_prefix}{trainer.run_name}",
        mlflow_tracking_uri=mlflow.tracking_uri,
        dagster_run_id=context.run.run_id,
        partitions=batches,
    )
    context.log.info(f"training on topic {layout.topic} ({len(batches)} batches materialized)")
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
    description="The checkpoint in S3 reloads with AutoModelForCausalLM and generates tokens.",
)
def checkpoint_reloads(context: dg.AssetCheckExecutionContext, s3: S3Resource) -> dg.AssetCheckResult:
    import tempfile

    from pipeline_project.training.verify import reload_and_generate

    meta = latest_materialization_metadata(context.instance, deepseek_checkpoint.key)
    uri = meta.get("checkpoint_uri")
    if not uri:
        return dg.AssetCheckResult(passed=meta.get("steps", 0) == 0, metadata={"reason": "no checkpoint written"})
    with tempfile.TemporaryDirectory() as tmp:
        generated = reload_and_generate(s3.get_client(), uri, tmp, new_tokens=4)
    return dg.AssetCheckResult(
        passed=len(generated) == 4, metadata={"checkpoint_uri": uri, "generated_token_ids": generated}
    )
