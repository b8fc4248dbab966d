"""`kafka_topic`: the cleaned batch as DeepSeek token blocks in Kafka, produced in one transaction."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from pipeline_project.assets.cleaned import cleaned_shards, read_shard_manifest
from pipeline_project.assets.partitions import NETWORK_RETRY, batches, latest_materialization_metadata
from pipeline_project.resources.kafka import KafkaResource
from pipeline_project.resources.layout import PipelineLayout
from pipeline_project.resources.mlflow import MlflowResource


def _iter_shard_texts(client, layout: PipelineLayout, manifest: dict):
    from pipeline_project.cleaning import read_shard

    for entry in manifest["shards"]:
        data = client.get_object(Bucket=layout.bucket, Key=entry["key"])["Body"].read()
        for rec in read_shard(data):
            yield rec["text"]


def offset_ranges_table(ranges: dict) -> str:
    rows = ["| partition | first offset | last offset |", "|---:|---:|---:|"]
    rows += [f"| {p} | {r[0]} | {r[1]} |" for p, r in sorted(ranges.items(), key=lambda kv: int(kv[0]))]
    return "\n".join(rows)


@dg.asset(
    partitions_def=batches,
    deps=[cleaned_shards],
    group_name="ingest",
    kinds={"kafka"},
    retry_policy=NETWORK_RETRY,
    automation_condition=dg.AutomationCondition.eager(),
    description="Token blocks (little-endian uint32, seq_len tokens each, EOS between documents) in the Kafka "
    "topic, produced transactionally. A ledger record in `<topic>.ledger`, committed in the same transaction, "
    "makes re-materialization produce nothing twice.",
)
def kafka_topic(
    context: dg.AssetExecutionContext,
    s3: S3Resource,
    layout: PipelineLayout,
    kafka: KafkaResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    from pipeline_project.streaming.producer import ProducerConfig, tokenize_and_produce
    from pipeline_project.streaming.tokenizer import load_tokenizer

    batch_id = context.partition_key
    client = s3.get_client()
    manifest = read_shard_manifest(client, layout, batch_id)
    kafka.ensure_topic(
        layout.topic,
        partitions=layout.topic_partitions,
        replication_factor=layout.replication_factor,
        min_insync_replicas=layout.min_insync_replicas,
    )
    cleaned_meta = latest_materialization_metadata(context.instance, cleaned_shards.key, batch_id)
    report = tokenize_and_produce(
        kafka.settings(),
        layout.topic,
        _iter_shard_texts(client, layout, manifest),
        tokenizer=load_tokenizer(),
        seq_len=layout.seq_len,
        source=batch_id,
        ledger_key=batch_id,
        content_hash=cleaned_meta.get("manifest_sha256") or manifest["config_hash"],
        config=ProducerConfig(max_message_bytes=layout.message_bytes),
    )
    ranges = {str(p): [int(a), int(b)] for p, (a, b) in report.offsets.items()}
    stage = {f"seconds_{k}": round(float(v), 4) for k, v in (report.stage_seconds or {}).items()}
    mlflow_url = None
    if not report.reused:
        mlflow_url = mlflow.log_ingest_run(
            run_name=f"produce-{batch_id}",
            tags={"dagster.run_id": context.run.run_id, "batch": batch_id, "topic": layout.topic},
            params={
                "seq_len": layout.seq_len,
                "partitions": layout.topic_partitions,
                "tokenizer": report.tokenizer_name,
            },
            metrics={
                "blocks": report.blocks,
                "tokens": report.tokens,
                "bytes": report.bytes,
                "produce_mb_per_s": report.mb_per_s,
                **stage,
                **{f"kafka_{k}": v for k, v in (report.kafka_stats or {}).items() if isinstance(v, (int, float))},
            },
        )
    context.log.info(f"batch {batch_id}: {report.blocks} blocks, {report.tokens} tokens, reused={report.reused}")
    metadata = {
        "topic": layout.topic,
        "blocks": report.blocks,
        "tokens": report.tokens,
        "bytes": report.bytes,
        "offset_ranges": ranges,
        "offset_ranges_table": dg.MetadataValue.md(offset_ranges_table(ranges)),
        "produce_mb_per_s": round(float(report.mb_per_s), 3),
        "reused_existing": bool(report.reused),
        "tokenizer": report.tokenizer_name,
        "tokenizer_hash": report.tokenizer_hash,
        "seq_len": layout.seq_len,
        **stage,
    }
    if mlflow_url:
        metadata["mlflow_run"] = dg.MetadataValue.url(mlflow_url)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(
    asset=kafka_topic,
    partitions_def=batches,
    blocking=True,
    description="The topic holds the offsets the asset claims, and they carry this batch's blocks.",
)
def topic_holds_claimed_offsets(
    context: dg.AssetCheckExecutionContext, kafka: KafkaResource, layout: PipelineLayout
) -> dg.AssetCheckResult:
    from confluent_kafka import TopicPartition

    from pipeline_project.streaming.format import H_SOURCE

    meta = latest_materialization_metadata(context.instance, kafka_topic.key, context.partition_key)
    ranges = meta.get("offset_ranges") or {}
    consumer = kafka.consumer()
    problems = []
    try:
        for p, (first, last) in ranges.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(layout.topic, int(p)), timeout=10)
            if not (low <= first and last < high):
                problems.append(f"partition {p}: claimed [{first}, {last}] outside [{low}, {high})")
                continue
            consumer.assign([TopicPartition(layout.topic, int(p), int(first))])
            msgs = consumer.consume(num_messages=1, timeout=10)
            if not msgs or msgs[0].error() or msgs[0].offset() != first:
                problems.append(f"partition {p}: no committed message at offset {first}")
                continue
            src = dict(msgs[0].headers() or []).get(H_SOURCE, b"").decode()
            if src != context.partition_key:
                problems.append(f"partition {p} offset {first}: source {src!r}")
    finally:
        consumer.close()
    nothing_to_hold = not ranges and meta.get("blocks") == 0
    return dg.AssetCheckResult(
        passed=(bool(ranges) or nothing_to_hold) and not problems,
        metadata={"partitions": len(ranges), "problems": problems},
    )
