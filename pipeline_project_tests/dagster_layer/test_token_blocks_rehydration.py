"""`token_blocks` with FineWeb-2 rehydration against the real stack (S3 server, 3 Kafka brokers, PostgreSQL index):
a batch with known copy counts lands in the topic each document weight times, exactly once; off gives the plain
blocks, and switching the knob for a produced batch is refused."""

import json
import random

import dagster as dg
import numpy as np
import pytest
from confluent_kafka import KafkaError, TopicPartition

from pipeline_project.cleaning import read_shard_manifest
from pipeline_project.defs.assets import cleaned, raw, token_blocks
from pipeline_project.defs.assets.cleaned import cleaned_shards
from pipeline_project.defs.assets.raw import raw_text
from pipeline_project.defs.assets.token_blocks import _produce, batch_documents
from pipeline_project.defs.assets.token_blocks import token_blocks as token_blocks_asset
from pipeline_project.defs.partitions import batches
from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig
from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
from pipeline_project.demo.sample.corpus import prose_document
from pipeline_project.provenance.trace import DocumentCatalog
from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.kafka.format import decode_blocks
from pipeline_project.streaming.kafka.spans import H_SPANS, decode_spans
from pipeline_project.streaming.tokenizer import load_tokenizer

pytestmark = pytest.mark.stack

# raw lines: X twice (cluster 2: weight 2), Y four times (cluster 4: weight 3), Z once (weight 1)
LINES = ["X", "X", "Y", "Y", "Y", "Y", "Z"]
WEIGHTS = {"X": 2, "Y": 3, "Z": 1}


def _layout(layout: PipelineLayout, topic: str, rehydration: bool) -> PipelineLayout:
    return PipelineLayout(
        raw_prefix=layout.raw_prefix,
        shards_prefix=layout.shards_prefix,
        exclusions_prefix=layout.exclusions_prefix,
        checkpoints_prefix=layout.checkpoints_prefix,
        topic=TopicConfig(
            name=topic, seq_len=layout.topic.seq_len, message_bytes=layout.topic.message_bytes, rehydration=rehydration
        ),
    )


def _materialize(instance, resources, layout, batch, assets):
    checks = dg.load_asset_checks_from_modules([raw, cleaned, token_blocks])
    return dg.materialize([*assets, *checks], resources={**resources, "layout": layout}, partition_key=batch,
                          instance=instance, raise_on_error=False)  # fmt: skip


def _meta(result, key="token_blocks"):
    (mat,) = [e.materialization for e in result.get_asset_materialization_events()
              if e.materialization.asset_key.to_user_string() == key]  # fmt: skip
    return {k: getattr(v, "value", v) for k, v in mat.metadata.items()}


def _messages(kafka, topic):
    """Every committed message of the topic, with its spans, read to the end of each partition."""
    settings = kafka.settings()
    parts = settings.make_admin().list_topics(topic, timeout=10).topics[topic].partitions
    consumer = settings.make_consumer(overrides={"enable.partition.eof": True, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out, done = [], set()
    try:
        while len(done) < len(parts):
            for msg in consumer.consume(256, timeout=1.0):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done.add(msg.partition())
                    continue
                header, blocks = decode_blocks(msg.value(), msg.headers(), topic=topic, partition=msg.partition(),
                                               offset=msg.offset())  # fmt: skip
                spans = decode_spans(dict(msg.headers())[H_SPANS])
                out.append((header.source, blocks.reshape(-1), spans))
    finally:
        consumer.close()
    return out


def _words(text: str) -> str:
    return " ".join(text.split())  # cleaning normalizes whitespace: compare the words


def _copies(messages, catalog, tokenizer):
    """{cleaned text's words: copies in the topic}, each copy's tokens checked against the document tokenized
    again."""
    copies: dict[str, int] = {}
    for batch, flat, spans in messages:
        at = 0
        for s in spans:
            text = catalog.text(batch, s.ordinal)
            expected = np.append(tokenizer.encode_batch([text])[0], tokenizer.eos_id)
            assert np.array_equal(flat[at : at + s.count], expected[s.first : s.first + s.count])
            at += s.count
            if s.first == 0:
                copies[_words(text)] = copies.get(_words(text), 0) + 1
    return copies


def test_rehydrated_blocks_hold_each_document_weight_times_exactly_once(instance, resources, layout, s3):
    rng = random.Random(31)
    texts = {name: prose_document(rng, "en", 4) for name in WEIGHTS}
    body = "".join(json.dumps({"text": texts[n]}) + "\n" for n in LINES)
    s3.put_object(Bucket=layout.bucket, Key=f"{layout.raw_prefix}web/copies.jsonl", Body=body.encode())
    with dg.build_sensor_context(instance=instance, resources={"s3": resources["s3"], "layout": layout}) as ctx:
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    on, off = _layout(layout, layout.topic.name, True), _layout(layout, f"{layout.topic.name}-off", False)
    result = _materialize(instance, resources, on, batch, [raw_text, cleaned_shards, token_blocks_asset])
    assert result.success
    c, k = _meta(result, "cleaned_shards"), _meta(result)
    assert (c["documents_in"], c["kept"], c["dropped"]) == (7, 3, 4)  # accounting unchanged: copies are dropped
    assert (k["rehydrated_docs"], k["rehydration_copies"]) == (2, 3)

    catalog, tokenizer = DocumentCatalog(s3, layout.bucket, layout.shards_prefix), load_tokenizer()
    by_text = _copies(_messages(resources["kafka"], on.topic.name), catalog, tokenizer)
    assert by_text == {_words(texts[n]): w for n, w in WEIGHTS.items()}

    again = _materialize(instance, resources, on, batch, [token_blocks_asset])
    assert _meta(again)["reused_existing"] is True and _meta(again)["offset_ranges"] == k["offset_ranges"]
    assert len(_messages(resources["kafka"], on.topic.name)) == k["messages"]  # nothing produced twice

    plain = _meta(_materialize(instance, resources, off, batch, [token_blocks_asset]))
    assert "rehydration_copies" not in plain
    assert _copies(_messages(resources["kafka"], off.topic.name), catalog, tokenizer) == {
        _words(t): 1 for t in texts.values()
    }
    assert k["tokens"] - plain["tokens"] == sum(
        (w - 1) * (len(tokenizer.encode_batch([texts[n]])[0]) + 1) for n, w in WEIGHTS.items()
    )
    # the knob is part of the ledger's fingerprint: a batch produced without it is refused with it
    manifest = read_shard_manifest(s3, layout.bucket, layout.shard_dir(batch))
    documents, rehydration = batch_documents(s3, on, manifest)
    with pytest.raises(LedgerConflictError, match=f"refusing.*packing {rehydration}"):
        _produce(resources["kafka"], off, documents, batch, manifest, rehydration)


def _ingest(instance, resources, layout, s3, key: str, body: str, cursor=None):
    """Upload one raw object and let the sensor make its batch: (batch id, the sensor's cursor)."""
    s3.put_object(Bucket=layout.bucket, Key=f"{layout.raw_prefix}{key}", Body=body.encode())
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"s3": resources["s3"], "layout": layout}) as ctx:  # fmt: skip
        result = raw_s3_sensor(ctx)
    batch = result.run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    return batch, result.cursor


def test_a_reclean_after_other_batches_copied_its_documents_keeps_the_produced_weights(instance, resources, layout, s3):
    """Issue 37 finding 6: duplicate-cluster counts grow as other batches publish; a re-clean of a produced batch
    (the same content) wrote the grown counts, `token_blocks` derived other weights and failed for good on the
    packing hash, and `ledger retire` could not help (a retirement compared the content hash only)."""
    rng = random.Random(32)
    texts = {name: prose_document(rng, "en", 4) for name in WEIGHTS}
    on = _layout(layout, layout.topic.name, True)
    body = "".join(json.dumps({"text": texts[n]}) + "\n" for n in LINES)
    first, cursor = _ingest(instance, resources, layout, s3, "web/a.jsonl", body)
    produced = _materialize(instance, resources, on, first, [raw_text, cleaned_shards, token_blocks_asset])
    assert produced.success and _meta(produced)["rehydration_copies"] == 3
    more = "".join(json.dumps({"text": texts[n]}) + "\n" for n in ("X", "Y", "Z"))  # more copies of every cluster
    later, _ = _ingest(instance, resources, layout, s3, "web/b.jsonl", more, cursor)
    assert _materialize(instance, resources, on, later, [raw_text, cleaned_shards]).success
    again = _materialize(instance, resources, on, first, [cleaned_shards, token_blocks_asset])
    assert again.success, [e.event_specific_data for e in again.all_events if e.is_step_failure]
    assert _meta(again)["reused_existing"] is True and _meta(again)["offset_ranges"] == _meta(produced)["offset_ranges"]
