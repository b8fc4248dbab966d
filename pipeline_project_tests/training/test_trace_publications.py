"""`trace` after a retire and a re-clean, on the real stack (issue 40, section 1): a batch is published and
produced, its ledger entry retired, the batch cleaned again to other content (its old publication superseded as
`cleaned_shards` supersedes it) and produced again. Every message names its publication in the `pub` header, so a
block of the first production traces to the first publication's documents (text included) and a block of the
second to the second's, though both sit in the topic under the same batch and the same document ordinals."""

from __future__ import annotations

import json
import uuid

import pytest

from pipeline_project.cleaning import CleaningConfig, read_object
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output.publish import read_shard_manifest_or_none, write_manifest
from pipeline_project.cleaning.output.shards import read_shard
from pipeline_project.provenance.publications import archive_publication, delete_superseded_unless_archived
from pipeline_project.provenance.trace import DocumentCatalog, trace_blocks
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.ledger.retire import retire_entry
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project_harness.standins import WholeBatchPipeline, publish_batch
from pipeline_project_tests.cleaning.conftest import prose
from pipeline_project_tests.training.test_provenance import _message_positions

pytestmark = pytest.mark.stack

SEQ_LEN = 64


def _clean_and_publish(s3, bucket: str, batch: str, shards_prefix: str, attempt: str, key: str, lines: list[str]):
    """The raw object cleaned and published as `cleaned_shards` publishes a batch: shards under the attempt's own
    prefix, then the batch's manifest, then the superseded publication's objects deleted unless it was produced."""
    s3.put_object(Bucket=bucket, Key=key, Body="".join(json.dumps({"text": t}) + "\n" for t in lines).encode())
    config = CleaningConfig()
    items = list(read_object(key, s3.get_object(Bucket=bucket, Key=key)["Body"].read(), config))
    result = WholeBatchPipeline(config).run(items, batch, MemoryDedupIndex())
    shard_dir = f"{shards_prefix}{batch}/"
    previous = read_shard_manifest_or_none(s3, bucket, shard_dir)
    staged = publish_batch(s3, bucket, batch_id=batch, shard_dir=f"{shard_dir}{attempt}/",
                           exclusions_dir=f"{shards_prefix}exclusions/{batch}/{attempt}/", result=result,
                           config=config, input_keys=[key])  # fmt: skip
    manifest = write_manifest(s3, bucket, shard_dir, staged.manifest).manifest
    delete_superseded_unless_archived(s3, bucket, shard_dir, previous, manifest)
    return manifest


def _produce(kafka, s3, bucket: str, shard_dir: str, topic: str, batch: str, manifest, tokenizer):
    """As `token_blocks` produces a batch: the publication archived first, then its documents produced."""
    from pipeline_project.cleaning.output.publish import iter_shard_documents

    archive_publication(s3, bucket, shard_dir, manifest)
    return tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key=batch,
            content_hash=manifest.content_hash(),
            source=batch,
            seq_len=SEQ_LEN,
            tokenizer=tokenizer,
            config=ProducerConfig(max_message_bytes=2 * SEQ_LEN * 4),
        ),
        iter_shard_documents(s3, bucket, manifest),
    )


def _documents(s3, bucket: str, manifest) -> list[dict]:
    return [r for e in manifest.shards for r in read_shard(s3.get_object(Bucket=bucket, Key=e.key)["Body"].read())]


def test_trace_names_the_publication_each_block_came_from_after_retire_and_reclean(stack, deepseek_tokenizer):
    run = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    s3, bucket = stack.s3_client(), stack.bucket
    batch, shards_prefix, topic = f"pub-{run}", f"test-pub-{run}/shards/", f"test-pub-{run}"
    shard_dir = f"{shards_prefix}{batch}/"
    key = f"test-pub-{run}/raw/pages.jsonl"
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)

    first = _clean_and_publish(s3, bucket, batch, shards_prefix, "a1", key, [prose(8, seed=s) for s in range(6)])
    first_docs = _documents(s3, bucket, first)
    report_1 = _produce(kafka, s3, bucket, shard_dir, topic, batch, first, deepseek_tokenizer)
    [retired] = retire_entry(kafka, topic, batch, "re-clean with other content")
    assert retired.content_hash == first.content_hash()

    # the raw object rewritten: the re-clean keeps other documents under the same ordinals
    second = _clean_and_publish(s3, bucket, batch, shards_prefix, "a2", key, [prose(8, seed=s) for s in range(3, 9)])
    second_docs = _documents(s3, bucket, second)
    assert second.content_hash() != first.content_hash() and len(second_docs) == len(first_docs)
    assert [d["text"] for d in second_docs] != [d["text"] for d in first_docs]
    report_2 = _produce(kafka, s3, bucket, shard_dir, topic, batch, second, deepseek_tokenizer)

    catalog = DocumentCatalog(s3, bucket, shards_prefix)
    for report, manifest, docs in ((report_1, first, first_docs), (report_2, second, second_docs)):
        positions = _message_positions(kafka, topic, report.offsets)  # the retire wrote nothing into the topic
        traced = trace_blocks(kafka, catalog, topic, [[p, o, 0, -1] for p, o in positions])
        assert len(traced["documents"]) == len(docs)  # every document of the publication, none of the other's
        for doc in traced["documents"].values():
            # the text: JSON Lines ids (`<key>#<line>`) are the same in both publications, the documents are not
            shard = s3.get_object(Bucket=bucket, Key=doc["shard"].removeprefix(f"s3://{bucket}/"))["Body"].read()
            text = list(read_shard(shard))[doc["shard_position"]]["text"]  # its position in its shard
            assert text == docs[doc["ordinal"]]["text"] and doc["id"] == docs[doc["ordinal"]]["id"]
            assert catalog.text(batch, doc["ordinal"], manifest.content_hash()) == text
            assert doc["publication"] == manifest.content_hash() and doc["batch"] == batch
        assert {b["publication"] for b in traced["blocks"]} == {manifest.content_hash()}
