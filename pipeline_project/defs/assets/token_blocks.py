"""`token_blocks`: the cleaned batch as DeepSeek token blocks in the Kafka topic, produced once, in bounded transactions."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.common.run_tags import config_hash, run_tags
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.partitions import NETWORK_RETRY, batches, latest_materialization_metadata
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.layout import PipelineLayout
from pipeline_project.defs.resources.locks import BatchLocks
from pipeline_project.defs.resources.mlflow import MlflowResource
from pipeline_project.defs.resources.pushgateway import PushgatewayResource


def domains_table(domains: dict) -> str:
    """Per-domain documents, blocks and tokens of the batch as a markdown table."""
    rows = ["| domain | documents | blocks | tokens | messages |", "|---|---:|---:|---:|---:|"]
    rows += [
        f"| {d} | {c.get('docs', 0):,} | {c['blocks']:,} | {c['tokens']:,} | {c['messages']:,} |"
        for d, c in sorted(domains.items())
    ]
    return "\n".join(rows)


def offset_ranges_table(ranges: dict) -> str:
    rows = ["| partition | first offset | last offset |", "|---:|---:|---:|"]
    rows += [f"| {p} | {r[0]} | {r[1]} |" for p, r in sorted(ranges.items(), key=lambda kv: int(kv[0]))]
    return "\n".join(rows)


def corpus_counts(domains: dict, dropped_by_reason: dict) -> dict[str, int]:
    """`fim_docs` (when FIM is on), `decontaminated` and `decontaminated_<benchmark>` (the cleaning drops with reason
    `decontaminated:<benchmark>`, from the batch's cleaned_shards metadata; 0 when none or off)."""
    out = {}
    if any("fim_docs" in c for c in domains.values()):
        out["fim_docs"] = sum(int(c.get("fim_docs", 0)) for c in domains.values())
    out["decontaminated"] = 0
    for key, n in dropped_by_reason.items():
        _step, _, reason = key.partition(":")
        if reason.startswith("decontaminated:"):
            benchmark = reason.removeprefix("decontaminated:")
            out[f"decontaminated_{benchmark}"] = out.get(f"decontaminated_{benchmark}", 0) + int(n)
            out["decontaminated"] += int(n)
    return out


@dg.asset(
    partitions_def=batches,
    code_version="1",  # bump when a change makes this asset write something else for the same input
    deps=[cleaned_shards],
    group_name="ingest",
    kinds={"kafka"},
    retry_policy=NETWORK_RETRY,
    automation_condition=dg.AutomationCondition.eager(),
    description="Token blocks (little-endian uint32, seq_len tokens each, EOS between documents) in the Kafka "
    "topic, produced transactionally. A ledger record in `<topic>.ledger`, committed in the same transaction, "
    "makes re-materialization produce nothing twice. Documents are packed per domain (cleaning profile): a block "
    "never mixes domains, every message carries a `domain` header, and the metadata counts blocks and tokens per "
    "domain, FIM documents and decontaminated documents. A `spans` header names the documents in every message, "
    "a `pub` header the publication (shard manifest content hash, archived before producing) they index "
    "(`pipeline-project trace`).",
)
def token_blocks(
    context: dg.AssetExecutionContext,
    s3: S3Resource,
    layout: PipelineLayout,
    kafka: KafkaResource,
    mlflow: MlflowResource,
    pushgateway: PushgatewayResource,
    locks: BatchLocks,
) -> dg.MaterializeResult:
    from pipeline_project.cleaning import read_shard_manifest
    from pipeline_project.provenance.publications import archive_publication

    batch_id = context.partition_key
    client = s3.get_client()
    cleaned_meta = latest_materialization_metadata(context.instance, cleaned_shards.key, batch_id)
    with locks.hold(batch_id):  # no retune, retire or re-clean rewrites the batch while it is produced
        manifest = read_shard_manifest(client, layout.bucket, layout.shard_dir(batch_id))
        # kept addressable by its content hash, the `pub` header of every message (`provenance.publications`)
        archive_publication(client, layout.bucket, layout.shard_dir(batch_id), manifest)
        documents, rehydration = batch_documents(client, layout, manifest)
        report = _produce(kafka, layout, documents, batch_id, manifest, rehydration)
    pushgateway.push_batch("pipeline_produce", "token_blocks", batch_id, lambda m: m.record_produce(report))
    mlflow_url = None if report.reused else _log_produce_run(context, mlflow, layout, manifest, report)
    context.log.info(f"batch {batch_id}: {report.blocks} blocks, {report.tokens} tokens, reused={report.reused}")
    dropped_by_reason = cleaned_meta.get("dropped_by_reason") or {}
    return dg.MaterializeResult(metadata=produce_metadata(layout, report, dropped_by_reason, mlflow_url))


def batch_documents(client, layout: PipelineLayout, manifest):
    """The batch's kept documents as the producer reads them, and the rehydration fingerprint ("" when off):
    with `layout.topic.rehydration`, each with its weight, frozen from the batch's attribute file."""
    from pipeline_project.cleaning.dedup.rehydration import batch_weights, fingerprint, iter_weighted_documents
    from pipeline_project.cleaning.output.publish import iter_shard_documents

    config = layout.rehydration_config()
    if not config.enabled:
        return iter_shard_documents(client, layout.bucket, manifest), ""
    weights = batch_weights(client, layout.bucket, manifest, config)
    return iter_weighted_documents(client, layout.bucket, manifest, weights), fingerprint(config, weights)


def _produce(kafka: KafkaResource, layout: PipelineLayout, documents, batch_id: str, manifest, rehydration: str):
    """Make sure the topic exists as the layout says, then produce the batch's documents into it, once."""
    spec = layout.topic_spec
    kafka.ensure_token_topic(spec)
    return kafka.produce_token_blocks(
        spec,
        documents,
        source=batch_id,
        ledger_key=batch_id,
        content_hash=manifest.content_hash(),
        rehydration=rehydration,
    )


def stage_seconds(report) -> dict[str, float]:
    return {f"seconds_{k}": round(float(v), 4) for k, v in (report.stage_seconds or {}).items()}


def _log_produce_run(
    context: dg.AssetExecutionContext, mlflow: MlflowResource, layout: PipelineLayout, manifest, report
) -> str | None:
    """The MLflow run of a batch produced now (not reused); returns its URL."""
    batch_id = context.partition_key
    kafka_metrics = {f"kafka_{k}": v for k, v in (report.kafka_stats or {}).items() if isinstance(v, (int, float))}
    hashed = {
        "cleaning": manifest.config_hash,
        "seq_len": layout.topic.seq_len,
        "tokenizer": report.tokenizer_hash,
        "message_bytes": layout.topic.message_bytes,
        **({"fim": report.packing_hash} if report.packing_hash else {}),
    }
    return mlflow.log_ingest_run(
        run_name=f"produce-{batch_id}",
        tags=run_tags(
            dagster_run_id=context.run.run_id,
            partition=batch_id,
            asset="token_blocks",
            config_hash=config_hash(hashed),
            topic=layout.topic.name,
            batch=batch_id,  # = partition; kept for searches written before the shared vocabulary
        ),
        params={
            "seq_len": layout.topic.seq_len,
            "partitions": layout.topic.partitions,
            "tokenizer": report.tokenizer_name,
        },
        metrics={
            "blocks": report.blocks,
            "tokens": report.tokens,
            "bytes": report.bytes,
            "produce_mb_per_s": report.mb_per_s,
            **{f"tokens_{d}": c["tokens"] for d, c in report.domains.items()},
            **stage_seconds(report),
            **kafka_metrics,
        },
    )


def produce_metadata(layout: PipelineLayout, report, dropped_by_reason: dict, mlflow_url: str | None) -> dict:
    """The asset's materialization metadata for a produce `report` (`dropped_by_reason`: from cleaned_shards)."""
    ranges = {str(p): [int(a), int(b)] for p, (a, b) in report.offsets.items()}
    metadata = {
        "topic": layout.topic.name,
        "blocks": report.blocks,
        "messages": report.messages,
        "tokens": report.tokens,  # real tokens: padding is not counted
        "tail_tokens": report.tail_tokens,
        "pad_tokens": report.pad_tokens,
        "dropped_tokens": report.dropped_tokens,
        "transactions": report.transactions,
        "bytes": report.bytes,
        "offset_ranges": ranges,
        "offset_ranges_table": dg.MetadataValue.md(offset_ranges_table(ranges)),
        "produce_mb_per_s": round(float(report.mb_per_s), 3),
        "reused_existing": bool(report.reused),
        "tokenizer": report.tokenizer_name,
        "tokenizer_hash": report.tokenizer_hash,
        "seq_len": layout.topic.seq_len,
        **stage_seconds(report),
    }
    if report.domains:
        metadata.update(domain_metadata(report.domains))
    metadata.update(rehydration_counts(report))
    metadata.update(corpus_counts(report.domains, dropped_by_reason))
    if mlflow_url:
        metadata["mlflow_run"] = dg.MetadataValue.url(mlflow_url)
    return metadata


def rehydration_counts(report) -> dict[str, int]:
    """With rehydration on: documents packed more than once and the extra copies (documents are still counted
    once in `domains`' docs; the copies are extra blocks, not extra documents)."""
    packing = report.packing or {}
    if "rehydration_copies" not in packing:
        return {}
    return {
        "rehydrated_docs": int(packing["rehydrated_docs"]),
        "rehydration_copies": int(packing["rehydration_copies"]),
    }


def domain_metadata(domains: dict) -> dict:
    metadata = {"domains": domains, "domains_table": dg.MetadataValue.md(domains_table(domains))}
    for d, c in domains.items():
        metadata[f"tokens_{d}"] = c["tokens"]
        metadata[f"blocks_{d}"] = c["blocks"]
        if "fim_docs" in c:  # documents laid out for fill-in-the-middle (FIM on)
            metadata[f"fim_docs_{d}"] = c["fim_docs"]
        if "rehydration_copies" in c:  # rehydration on: documents repeated, extra copies packed
            metadata[f"rehydrated_docs_{d}"] = c["rehydrated_docs"]
            metadata[f"rehydration_copies_{d}"] = c["rehydration_copies"]
    return metadata


@dg.asset_check(
    asset=token_blocks,
    partitions_def=batches,
    blocking=True,
    description="The ledger records this batch at the offsets the asset claims, and reading those offsets back "
    "(read_committed) finds exactly its messages and blocks, decodable with its seq_len and tokenizer.",
)
def topic_holds_claimed_blocks(
    context: dg.AssetCheckExecutionContext, kafka: KafkaResource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    meta = latest_materialization_metadata(context.instance, token_blocks.key, context.partition_key)
    claimed = meta.get("offset_ranges") or {}
    report = kafka.ledger_entry(layout.topic.name, context.partition_key)
    if report is None:
        return dg.AssetCheckResult(passed=False, metadata={"problem": "no ledger entry for this batch"})
    recorded = {str(p): [int(a), int(b)] for p, (a, b) in report.offsets.items()}
    if recorded != claimed or report.blocks != meta.get("blocks"):
        problem = (
            f"ledger records {report.blocks} blocks at {recorded}, the asset claims {meta.get('blocks')} at {claimed}"
        )
        return dg.AssetCheckResult(passed=False, metadata={"problem": problem})
    try:
        found = kafka.verify_blocks(report)
    except Exception as exc:  # noqa: BLE001 - any failure to read the claimed blocks back fails the check
        return dg.AssetCheckResult(passed=False, metadata={"problem": f"{type(exc).__name__}: {exc}"})
    return dg.AssetCheckResult(
        passed=True,
        metadata={"partitions": len(recorded), "messages": found["messages"], "blocks": found["blocks"]},
    )
