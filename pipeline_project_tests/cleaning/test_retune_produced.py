"""`retune --write` on a produced batch (issue 40, section 2), on the real stack: a new benchmark drops three planted
documents of a batch already in the topic. The retune retracts exactly the blocks that hold them (by the messages'
`spans`), publishes the batch again without them, keeps the produced publication so its blocks still trace to
their documents, and reports as exposure the reads of those blocks that a checkpoint's step log records."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from pipeline_project.cleaning import read_object
from pipeline_project.cleaning.output.publish import iter_shard_documents, read_shard_manifest, verify_published
from pipeline_project.cli.retune import print_report
from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig
from pipeline_project.ops.retune import run_retune
from pipeline_project.provenance.blocks import batch_messages
from pipeline_project.provenance.trace import DocumentCatalog, trace_blocks
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project.streaming.retractions.topic import read_retractions
from pipeline_project.training.step_log import STEPS_FILE, write_steps
from pipeline_project_tests.cleaning.test_retune import BASE, _clean, _planted

pytestmark = pytest.mark.stack
SEQ_LEN = 64


@pytest.fixture(scope="module")
def deepseek_tokenizer():
    from pipeline_project.streaming.tokenizer import load_tokenizer

    return load_tokenizer()


def _step_log(s3, bucket: str, root: str, topic: str, runs: list[list[int]], tmp_path) -> str:
    """A checkpoint of lineage `trained` whose one step read `runs` on rank 0 (as the trainer writes it)."""
    folder = tmp_path / "ckpt"
    write_steps(folder, [{"1": runs}], step=1, previous=None, topic=topic, seq_len=SEQ_LEN, batch_size=1)
    prefix = f"{root}trained/step-1-abc123"
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{STEPS_FILE}", Body=(folder / STEPS_FILE).read_bytes())
    return f"s3://{bucket}/{prefix}/"


def test_retune_write_retracts_the_produced_blocks_and_reports_the_consumed_ones(
    local_stack, pg_url, tmp_path, capsys, deepseek_tokenizer
):
    settings = dataclasses.replace(local_stack.settings(), postgres_url=pg_url)
    client, bucket = settings.s3_client(), settings.bucket
    run = uuid.uuid4().hex[:8]
    layout = PipelineLayout(bucket=bucket, shards_prefix=f"test-rp-{run}/shards/", exclusions_prefix=f"test-rp-{run}/x/",
                            checkpoints_prefix=f"test-rp-{run}/checkpoints/", topic=TopicConfig(name=f"test-rp-{run}"))  # fmt: skip
    kafka, topic = KafkaSettings.from_settings(settings), layout.topic.name
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)
    data, names, new = _planted(tmp_path)
    produced = _clean(client, layout, "b", BASE, list(read_object("raw/b.jsonl", data, BASE)))
    from pipeline_project.provenance.publications import archive_publication

    archive_publication(client, bucket, layout.shard_dir("b"), produced)  # as token_blocks does before producing
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(topic=topic, ledger_key="b", content_hash=produced.content_hash(), source="b", seq_len=SEQ_LEN,
                       tokenizer=deepseek_tokenizer, config=ProducerConfig(max_message_bytes=2 * SEQ_LEN * 4)),
        iter_shard_documents(client, bucket, produced),
    )  # fmt: skip
    planted = {f"raw/b.jsonl#{names.index(d) + 1}" for d in ("verbatim", "spaced", "embedded")}

    # every block of the batch, traced to its documents: the ones holding a planted document are the affected
    messages = batch_messages(kafka, topic, {str(p): r for p, r in report.offsets.items()}, "b")
    catalog = DocumentCatalog(client, bucket, layout.shards_prefix)
    traced = trace_blocks(kafka, catalog, topic, [[m.partition, m.offset, 0, -1] for m in messages])
    holds = {
        (b["partition"], b["offset"], b["block"]): {traced["documents"][s["document"]]["id"] for s in b["spans"]}
        for b in traced["blocks"]
    }
    affected = {a for a, ids in holds.items() if ids & planted}
    assert affected and len(affected) < len(holds) and {i for ids in holds.values() for i in ids} >= planted

    # a trained step read one message whole: its affected blocks are the exposure, the others are not
    read = next(m for m in messages if any((m.partition, m.offset, b) in affected for b in range(len(m.blocks))))
    checkpoint = _step_log(client, bucket, layout.checkpoints_prefix, topic,
                           [[read.partition, read.offset, 0, len(read.blocks)]], tmp_path)  # fmt: skip

    out = run_retune(settings, layout, new, ["b"], write=True, dedup_url=pg_url)
    assert out["written"] == ["b"] and out["refused"] == {}, out["refused"]
    assert {a["doc_id"] for a in out["affected"]} == planted
    done = out["retracted"]["b"]
    assert done["publication"] == produced.content_hash() and done["blocks"] == len(affected)

    # the retraction names exactly the affected blocks
    request = read_retractions(kafka, topic).requests[done["request"]]
    retracted = {(r.partition, r.offset, b) for r in request.blocks for b in range(r.first, r.end)}
    assert retracted == affected

    # the exposure: the step's reads of affected blocks, with the planted documents' tokens in them
    exposed = {(e["partition"], e["offset"], e["block"]) for e in done["exposure"]}
    assert exposed == {(read.partition, read.offset, b) for b in range(len(read.blocks))} & affected
    assert {(e["lineage"], e["checkpoint"], e["step"], e["rank"]) for e in done["exposure"]} == {
        ("trained", checkpoint, 1, 0)
    }
    assert all(0 < e["tokens"] <= SEQ_LEN for e in done["exposure"])

    # the batch is published again without them; the produced publication stays whole, and its blocks trace to it
    current = read_shard_manifest(client, bucket, layout.shard_dir("b"))
    assert current.content_hash() != produced.content_hash() and current.counts["kept"] == produced.counts["kept"] - 3
    assert verify_published(client, bucket, produced) == []
    again = trace_blocks(kafka, DocumentCatalog(client, bucket, layout.shards_prefix), topic,
                         [[m.partition, m.offset, 0, -1] for m in messages])  # fmt: skip
    assert again["blocks"] == traced["blocks"] and {d["publication"] for d in again["documents"].values()} == {
        produced.content_hash()
    }

    # run again: nothing left to drop, nothing more retracted
    out2 = run_retune(settings, layout, new, ["b"], write=True, dedup_url=pg_url)
    assert out2["affected"] == [] and list(read_retractions(kafka, topic).requests) == [done["request"]]

    print_report(out, write=True)
    text = capsys.readouterr().out
    assert f"batch b: retracted {len(affected)} blocks (request {done['request']})" in text
    assert f"exposure: {len(exposed)} blocks already trained" in text and f"trained  {checkpoint}  steps 1-1" in text
