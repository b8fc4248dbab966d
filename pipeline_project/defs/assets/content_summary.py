"""`training_content_summary`: the public training-content summary (AI Act Art. 53(1)(d), the Commission's template)
of a lineage's checkpoint, generated from the pipeline's records by `provenance.content_summary` and stored as JSON and
Markdown beside the lineage's checkpoints; the Markdown is the materialization's metadata.

Materialized on demand (the UI, or `pipeline-project summary`, which runs the same code); its config picks the
lineage (default: the trainer's) and the step (default: the newest checkpoint), and takes what only the provider
knows (`provenance.content_summary.Provider`); the rest is written "to be completed by the provider".
"""

import json

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.assets.checkpoint import deepseek_checkpoint
from pipeline_project.defs.partitions import latest_materialization_metadata
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.resources.trainer import TrainerResource


class ContentSummaryConfig(dg.Config):
    lineage: str | None = None
    """The checkpoint lineage; None: the trainer's (`TrainerResource.run_name`)."""
    step: int | None = None
    """The checkpoint's step; None: the lineage's newest."""
    provider_json: str = ""
    """JSON of what only the provider knows (`provenance.content_summary.Provider`: provider, model, contact,
    source_categories, crawler_opt_out_policy, illegal_content_measures); "" leaves all of it to the provider."""


def summary_metadata(summary) -> dict:
    size = summary.document["1_general_information"]["size"]
    scope = summary.document["scope"]
    return {
        "summary": dg.MetadataValue.md(summary.markdown),
        "lineage": scope["lineage"],
        "checkpoint_step": scope["checkpoint_step"],
        "checkpoint_uri": scope["checkpoint_uri"],
        "batches": len(scope["batches"]),
        "documents_kept": size["documents_kept"],
        "tokens_trained": size["tokens_trained"],
        "unattributed_blocks": scope["unattributed_blocks"],
        "counts_add_up": summary.adds_up,
        "json_uri": dg.MetadataValue.path(summary.json_uri),
        "markdown_uri": dg.MetadataValue.path(summary.markdown_uri),
    }


@dg.asset(
    deps=[deepseek_checkpoint],
    code_version="1",  # bump when a change makes the summary say something else for the same records
    group_name="training",
    kinds={"s3"},
    description="The EU AI Act public training-content summary of a checkpoint (sources, sizes, languages, domains, "
    "filters with thresholds and counts, dedup, decontamination, takedowns and retractions), from the step logs, "
    "the ledger, the manifests and the cleaning config; JSON and Markdown beside the lineage's checkpoints.",
)
def training_content_summary(
    context: dg.AssetExecutionContext,
    config: ContentSummaryConfig,
    s3: S3Resource,
    kafka: KafkaResource,
    layout: PipelineLayout,
    trainer: TrainerResource,
) -> dg.MaterializeResult:
    from pipeline_project.provenance.content_summary import Provider, Stores, summarize

    stores = Stores(
        s3=s3.get_client(),
        bucket=layout.bucket,
        kafka=kafka.settings(),
        topic=layout.topic.name,
        checkpoints_root=layout.checkpoints_prefix,
        shards_prefix=layout.shards_prefix,
        raw_prefix=layout.raw_prefix,
    )
    fim = {"code_rate": layout.topic.fim_code_rate, "mode": layout.topic.fim_mode} if layout.topic.fim_code_rate else {}
    lineage = config.lineage or trainer.run_name
    summary = summarize(
        stores, lineage, config.step, provider=Provider.from_dict(json.loads(config.provider_json or "{}")), fim=fim
    )
    context.log.info(f"training-content summary of {lineage}: {summary.markdown_uri}")
    return dg.MaterializeResult(metadata=summary_metadata(summary))


@dg.asset_check(
    asset=training_content_summary,
    description="The summary's documents add up: per batch in == kept + dropped + quarantined, the per-document "
    "records agree with the shard manifest, and the sources' documents sum to the batches'.",
)
def summary_counts_add_up(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    meta = latest_materialization_metadata(context.instance, training_content_summary.key)
    return dg.AssetCheckResult(passed=bool(meta.get("counts_add_up")), metadata={"json_uri": str(meta.get("json_uri"))})
