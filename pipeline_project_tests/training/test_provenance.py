"""Provenance end to end on the real stack: raw objects in S3 -> cleaned, published batch -> token blocks (FIM on
for code) -> 4 training steps with 2 checkpoints -> `trace_step` -> re-read the named raw objects, re-clean,
re-tokenize (FIM where marked) -> exactly the token blocks the step trained on."""

from __future__ import annotations

import json
import random
import uuid

import numpy as np
import pytest
from confluent_kafka import TopicPartition
from typer.testing import CliRunner

from pipeline_project.cleaning import CleaningConfig, read_object
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output.attributes import ATTRIBUTES_NAME, AttributeWriter, rows_of, signal_columns
from pipeline_project.cleaning.output.publish import iter_shard_documents, write_manifest
from pipeline_project.cli.trace import trace_app
from pipeline_project.demo.sample.domains import code_file
from pipeline_project.provenance.trace import (
    DocumentCatalog,
    read_messages,
    trace_blocks,
    trace_message,
    trace_step,
)
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.load.domain_source import make_loader
from pipeline_project.streaming.load.loader import LoaderConfig
from pipeline_project.streaming.produce.fim import FimApplier, FimConfig, FimPolicy, FimSentinels
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
from pipeline_project_harness.standins import WholeBatchPipeline, publish_batch
from pipeline_project_tests.cleaning.conftest import prose
from pipeline_project_tests.training.test_entrypoint_integration import _run_trainer

pytestmark = pytest.mark.stack

SEQ_LEN, BATCH, STEPS = 64, 4, 4
FIM = FimPolicy(domains={"code": FimConfig(rate=0.5)}, seed=7)


def _raw_objects(prefix: str) -> dict[str, bytes]:
    rng = random.Random(3)
    code = [code_file(rng, i) for i in range(8)]
    code_lines = "".join(json.dumps({"text": src, "path": path}) + "\n" for path, src in code)
    web_lines = "".join(json.dumps({"text": prose(10, seed=s)}) + "\n" for s in range(6))
    return {
        f"{prefix}code/modules.jsonl": code_lines.encode(),
        f"{prefix}web/pages.jsonl": web_lines.encode(),
        f"{prefix}web/essay.txt": prose(14, seed=99).encode(),
    }


def _publish(s3, bucket: str, batch: str, shards_prefix: str, objects: dict[str, bytes]):
    """Cleaned and published as `cleaned_shards` does: shards, exclusions, the attribute file, the manifest."""
    config = CleaningConfig()
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    items = [item for key, data in objects.items() for item in read_object(key, data, config)]
    pipeline = WholeBatchPipeline(config)
    result = pipeline.run(items, batch, MemoryDedupIndex())
    shard_dir = f"{shards_prefix}{batch}/"
    published = publish_batch(s3, bucket, batch_id=batch, shard_dir=shard_dir,
                              exclusions_dir=f"{shards_prefix}exclusions/{batch}/", result=result, config=config,
                              input_keys=sorted(objects))  # fmt: skip
    writer = AttributeWriter(config, signal_columns(pipeline.chains))
    writer.add(rows_of(result.kept, result.dropped, result.quarantined))
    s3.put_object(Bucket=bucket, Key=f"{shard_dir}{ATTRIBUTES_NAME}", Body=writer.finish({}, {}))
    manifest = published.manifest.model_copy(update={"attributes": f"{shard_dir}{ATTRIBUTES_NAME}"})
    return write_manifest(s3, bucket, shard_dir, manifest).manifest


class Recleaner:
    """Documents as cleaning makes them again from their raw objects alone (each object read and cleaned once)."""

    def __init__(self, s3, bucket: str):
        self.s3, self.bucket, self.kept = s3, bucket, {}

    def text(self, document: dict) -> str:
        key = document["object"].removeprefix(f"s3://{self.bucket}/")
        if key not in self.kept:
            data = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            config = CleaningConfig()
            items = list(read_object(key, data, config))
            self.kept[key] = {d.id: d.text for d in WholeBatchPipeline(config).run(items, "verify").kept}
        return self.kept[key][document["id"]]


def _rebuild(traced: dict, recleaner: Recleaner, tokenizer) -> np.ndarray:
    """Every traced block rebuilt from its documents' raw objects; padding -1, as the loader delivers it."""
    fim = FimApplier(FIM, FimSentinels.of(tokenizer))
    tokens: dict[tuple[str, bool], np.ndarray] = {}
    rows = []
    for block in traced["blocks"]:
        row = np.full(SEQ_LEN, -1, dtype=np.int64)
        for span in block["spans"]:
            doc = traced["documents"][span["document"]]
            if (span["document"], span["fim"]) not in tokens:
                text = recleaner.text(doc)
                (ids,) = fim.encode([text], [doc["domain"]], tokenizer.encode_batch)
                assert fim.last_chosen == [span["fim"]]  # FIM is marked exactly where it was applied
                tokens[(span["document"], span["fim"])] = np.append(ids, tokenizer.eos_id)
            full = tokens[(span["document"], span["fim"])]
            (a, b), (first, last) = span["block_tokens"], span["document_tokens"]
            row[a:b] = full[first:last]
        rows.append(row)
    return np.stack(rows)


def test_trace_a_trained_step_back_to_its_raw_objects(stack, tmp_path, deepseek_tokenizer):
    run = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    s3, bucket = stack.s3_client(), stack.bucket
    batch, shards_prefix, topic = f"prov-{run}", f"test-prov-{run}/shards/", f"test-prov-{run}"
    manifest = _publish(s3, bucket, batch, shards_prefix, _raw_objects(f"test-prov-{run}/raw/"))
    ensure_topic(kafka.make_admin(), topic, partitions=2, replication_factor=3)
    report = tokenize_and_produce(
        kafka,
        ProduceRequest(
            topic=topic,
            ledger_key=batch,
            content_hash=manifest.content_hash(),
            source=batch,
            seq_len=SEQ_LEN,
            tokenizer=deepseek_tokenizer,
            config=ProducerConfig(fim=FIM, max_message_bytes=5 * SEQ_LEN * 4),
        ),
        iter_shard_documents(s3, bucket, manifest),
    )
    assert report.domains["code"]["fim_docs"] >= 1 and report.blocks >= STEPS * BATCH

    prefix = f"checkpoints/test-prov-{run}"
    job = {
        "train": {"preset": {"name": "tiny"}, "batch_size": BATCH, "device": "cpu", "max_steps": STEPS,
                  "checkpoint_every": 2},
        "kafka": kafka.model_dump(mode="json"), "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint, "bucket": bucket, "checkpoint_prefix": prefix,
        "loader_idle_timeout_s": 5, "log_model_to_mlflow": False,
    }  # fmt: skip
    assert _run_trainer(job, tmp_path)["steps"] == STEPS

    # the batches the trainer read, replayed: bounded mode delivers the same sequence for the same topic and seed
    loader = make_loader(LoaderConfig(kafka=kafka, topic=topic, seq_len=SEQ_LEN, batch_size=BATCH, rank=0,
                                      world_size=1, idle_timeout_s=5))  # fmt: skip
    with loader:
        trained = [next(iter(loader)).numpy() for _ in range(STEPS)]

    recleaner = Recleaner(s3, bucket)
    checkpoints = set()
    for step in range(1, STEPS + 1):  # steps 1-2 are in the first checkpoint's record: the trace walks back
        traced = trace_step(kafka, s3, bucket, step, 0, checkpoint_prefix=prefix, shards_prefix=shards_prefix)
        assert len(traced["blocks"]) == BATCH and traced["checkpoint"].startswith(f"s3://{bucket}/{prefix}/step-")
        checkpoints.add(traced["checkpoint"])
        np.testing.assert_array_equal(_rebuild(traced, recleaner, deepseek_tokenizer), trained[step - 1])
        for doc in traced["documents"].values():
            assert doc["batch"] == batch and doc["shard"].startswith(f"s3://{bucket}/{shards_prefix}{batch}/")
            assert doc["object"].startswith(f"s3://{bucket}/test-prov-{run}/raw/") and doc["domain"]
            assert (doc["line"] is None) == doc["object"].endswith(".txt")
            assert doc["attributes"]["decision"] == "kept" and doc["attributes"]["doc_id"] == doc["id"]
    assert len(checkpoints) == 2
    expected = trace_step(kafka, s3, bucket, 1, 0, checkpoint_prefix=prefix, shards_prefix=shards_prefix)
    _check_cli(stack, prefix, shards_prefix, expected)

    # every message of the batch traced by its position and rebuilt: FIM-rearranged documents among them
    positions = _message_positions(kafka, topic, report.offsets)
    traced = trace_blocks(
        kafka, DocumentCatalog(s3, bucket, shards_prefix), topic, [[p, o, 0, -1] for p, o in positions]
    )
    messages = read_messages(kafka, topic, positions)
    blocks = np.concatenate([messages[pos].blocks for pos in positions]).astype(np.int64)
    blocks[blocks == PAD_TOKEN] = -1
    assert len(blocks) == report.blocks
    np.testing.assert_array_equal(_rebuild(traced, recleaner, deepseek_tokenizer), blocks)
    fim_spans = {s["document"] for b in traced["blocks"] for s in b["spans"] if s["fim"]}
    assert len(fim_spans) == report.domains["code"]["fim_docs"]
    one = trace_message(kafka, s3, bucket, topic, *positions[-1], shards_prefix=shards_prefix)
    assert one["blocks"] == traced["blocks"][-len(one["blocks"]) :]


def _message_positions(kafka: KafkaSettings, topic: str, ranges: dict) -> list[tuple[int, int]]:
    """(partition, offset) of every data message in the ledger's ranges (transaction markers take offsets too)."""
    consumer = kafka.make_consumer(overrides={"isolation.level": "read_committed"})
    found = []
    try:
        for p, (low, high) in sorted(ranges.items()):  # high: the batch's last data message in p
            consumer.assign([TopicPartition(topic, p, low)])
            last = low - 1
            while last < high:
                msgs = [m for m in consumer.consume(64, timeout=1.0) if m.error() is None]
                found += [(p, m.offset()) for m in msgs if m.offset() <= high]
                last = max([last, *(m.offset() for m in msgs)])
    finally:
        consumer.close()
    return found


def _check_cli(stack, prefix: str, shards_prefix: str, expected: dict) -> None:
    """`pipeline-project trace step` prints what the library returns; a step not trained is one line, exit 1."""
    runner = CliRunner(env={"PIPELINE_KAFKA_BOOTSTRAP": stack.kafka_bootstrap, "PIPELINE_S3_ENDPOINT": stack.s3_endpoint,
                            "PIPELINE_S3_BUCKET": stack.bucket})  # fmt: skip
    ok = runner.invoke(trace_app, ["step", "--lineage", prefix, "--step", "1", "--shards-prefix", shards_prefix])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output) == json.loads(json.dumps(expected))
    bad = runner.invoke(trace_app, ["step", "--lineage", prefix, "--step", "99"])
    assert bad.exit_code == 1 and bad.output.strip().splitlines() == [
        "error: step 99 is after the lineage's last checkpoint (step 4)"
    ]
