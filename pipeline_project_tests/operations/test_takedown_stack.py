"""A takedown on the real stack (issue 40 section 3): a text with near copies in two batches, batch 1 trained by
checkpoint A, batch 2 produced but not trained. `takedown --text` finds the kept copies of both batches and the
dropped exact copy, retracts the blocks holding the kept ones, names exactly the steps and ranks of A that read
batch 1's copy, stores the report in S3; the next training run never trains a block holding batch 2's copy
(checked by content hash over the blocks it trained) and resumes exactly; the request run again adds nothing; a
re-upload of the text is dropped as `blocked:<request>`."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline_project.cleaning import Document
from pipeline_project.cleaning.attempt import BatchAttempt, clean_attempt
from pipeline_project.cleaning.dedup.blocklist import PostgresBlocklist
from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.output import publish
from pipeline_project.common.s3 import key_in_bucket
from pipeline_project.ingest.manifest import BatchManifest, RawObject
from pipeline_project.ops.takedown import Stores, TakedownRequest, takedown
from pipeline_project.ops.takedown.corpus import Corpus
from pipeline_project.ops.takedown.report import read_report
from pipeline_project.provenance.trace import read_messages
from pipeline_project.streaming.kafka.client import KafkaSettings, ensure_topic
from pipeline_project.training.checkpoint.store import latest_ref, s3_client
from pipeline_project.training.step_log import STEPS_FILE
from pipeline_project_tests.cleaning.test_dedup import _words
from pipeline_project_tests.operations.test_takedown_resolve import CFG, CONFIG, FIRST, OTHER, SECOND, TEXT
from pipeline_project_tests.training.test_entrypoint_integration import SEQ_LEN, _produce, _run_trainer

pytestmark = pytest.mark.stack
BATCH = 2


@pytest.fixture(scope="module")
def deepseek_tokenizer():
    from pipeline_project.streaming.tokenizer import load_tokenizer

    return load_tokenizer()


def _index(url: str) -> PostgresDedupIndex:
    return PostgresDedupIndex(url, num_perm=CFG.num_buckets * CFG.hashes_per_bucket, num_bands=CFG.num_buckets)


def _clean(s3, bucket: str, root: str, url: str, batch: str, texts: list[str], blocklist=None):
    raw = RawObject(key=f"{root}/raw/{batch}.jsonl", etag="e", size=1, last_modified="2026-12-07T00:00:00+00:00")
    run = BatchAttempt(
        client=s3, bucket=bucket, batch_id=batch, config=CONFIG,
        manifest=BatchManifest(batch_id=batch, bucket=bucket, objects=(raw,)),
        shard_dir=f"{root}/shards/{batch}/", exclusions_dir=f"{root}/exclusions/{batch}/", attempt=f"{batch}-{uuid.uuid4().hex[:8]}",
        max_shard_bytes=1 << 20, workers=0, chunk_docs=100, chunk_bytes=1 << 20, blocklist=blocklist,
    )  # fmt: skip
    docs = [Document(id=f"{raw.key}#{i + 1}", text=t, source=raw.key) for i, t in enumerate(texts)]
    return clean_attempt(run, _index(url), docs, publish.exclusion_recorder(CONFIG), lambda m: None)


def _steps(s3, bucket: str, prefix: str) -> tuple[str, dict]:
    ref = latest_ref(s3, bucket, prefix)
    key = f"{key_in_bucket(ref.uri, bucket)}/{STEPS_FILE}"
    return ref.uri, json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def _trained(steps: dict) -> set[tuple[int, int, int]]:
    runs = [run for per_rank in steps["ranks"] for per_step in per_rank.values() for run in per_step]
    return {(p, o, b) for p, o, first, n in runs for b in range(first, first + n)}


def _block_hashes(kafka, topic: str, addresses) -> dict[tuple[int, int, int], str]:
    messages = read_messages(kafka, topic, {(p, o) for p, o, _ in addresses})
    return {(p, o, b): hashlib.sha256(messages[(p, o)].blocks[b].tobytes()).hexdigest() for p, o, b in addresses}


def test_takedown_of_a_text_retracts_reports_exactly_and_blocks_a_reupload(stack, pg_url, tmp_path, deepseek_tokenizer):
    uid = uuid.uuid4().hex[:8]
    root, topic = f"test-takedown-{uid}", f"test-takedown-{uid}"
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap)
    ensure_topic(kafka.make_admin(), topic, partitions=1, replication_factor=3)
    s3, bucket = s3_client(stack), stack.bucket
    fillers = [" ".join(_words(60, 20000 + 1000 * i)) for i in range(4)]
    one = _clean(s3, bucket, root, pg_url, "b1", [fillers[0], FIRST, FIRST, fillers[1], OTHER])
    two = _clean(s3, bucket, root, pg_url, "b2", [fillers[2], SECOND, fillers[3]])
    assert one.out.counts["dropped"] == 1 and two.out.counts["kept"] == 3  # SECOND is not near FIRST: kept
    produce = lambda batch, outcome: _produce(  # noqa: E731
        kafka, topic, batch, list(publish.iter_shard_texts(s3, bucket, outcome.manifest)), deepseek_tokenizer
    )
    blocks = {"b1": produce("b1", one)}

    lineage = f"{root}/checkpoints/lin"
    job = {
        "train": {"preset": {"name": "tiny"}, "warmup_steps": 2, "batch_size": BATCH, "device": "cpu"},
        "kafka": kafka.model_dump(mode="json"), "topic": {"name": topic, "seq_len": SEQ_LEN},
        "s3_endpoint": stack.s3_endpoint, "bucket": bucket, "checkpoint_prefix": lineage,
        "partitions": ["b1"], "loader_idle_timeout_s": 5,
        "mlflow_tracking_uri": stack.mlflow_tracking_uri, "experiment_name": "test-takedown",
        "registered_model_name": f"test-takedown-{uid}",
    }  # fmt: skip
    assert _run_trainer(job, tmp_path)["status"] == "trained"
    checkpoint_a, steps_a = _steps(s3, bucket, lineage)
    blocks["b2"] = produce("b2", two)  # produced after A: not trained yet (a loader reads the topic to its end)

    text_file = tmp_path / "takedown.txt"
    text_file.write_text(TEXT)
    blocklist = PostgresBlocklist(pg_url)
    stores = Stores(
        s3=s3, bucket=bucket, kafka=kafka, topic=topic, index=_index(pg_url), blocklist=blocklist,
        ledger_index=None, config=CONFIG, corpus=Corpus(s3, bucket, f"{root}/shards/"),
        checkpoints_root=f"{root}/checkpoints", lineages=["lin"], mlflow=MlflowClient(stack.mlflow_tracking_uri),
    )  # fmt: skip
    request = TakedownRequest(request_id=f"gdpr-{uid}", reason="erasure", target_kind="text", target=str(text_file))
    report = takedown(stores, request, TEXT)

    first_id, dup_id, second_id = (f"{root}/raw/b1.jsonl#2", f"{root}/raw/b1.jsonl#3", f"{root}/raw/b2.jsonl#2")
    assert {(c.batch, c.doc_id, c.state) for c in report.copies} == {
        ("b1", first_id, "kept"),
        ("b1", dup_id, "dropped"),
        ("b2", second_id, "kept"),
    }
    assert all(c.blocks > 0 and c.produced for c in report.copies if c.state == "kept")
    assert report.retraction == f"takedown:{request.request_id}" and report.retracted_now == report.blocks > 0
    assert read_report(s3, bucket, request.request_id) == report

    # exactly the steps and ranks of A whose runs cover a block holding batch 1's copy
    hit_rows = [(e.partition, e.offset, e.block) for e in report.exposures]
    b1_blocks = {(r.partition, r.offset, r.block) for r in report.exposures}
    assert b1_blocks and all(e.batch == "b1" and e.doc_id == first_id for e in report.exposures)
    expected = {
        (int(step), rank)
        for rank, steps in enumerate(steps_a["ranks"])
        for step, runs in steps.items()
        for p, o, first, n in runs
        if any((p, o) == (bp, bo) and first <= bb < first + n for bp, bo, bb in b1_blocks)
    }
    assert {(e.step, e.rank) for e in report.exposures} == expected and len(hit_rows) == len(set(hit_rows))
    assert report.first_checkpoint == checkpoint_a and report.lineages[0].tokens > 0
    # A's model version carries the request, and its run the whole report
    assert report.tagged_versions == [f"test-takedown-{uid}/1"]
    version = stores.mlflow.get_model_version(f"test-takedown-{uid}", "1")
    tag = json.loads(version.tags[f"takedown.{request.request_id}"])
    assert tag["steps"] == [min(s for s, _ in expected), max(s for s, _ in expected)] and tag["tokens"] > 0
    logged = stores.mlflow.download_artifacts(version.run_id, f"takedowns/{request.request_id}.json", str(tmp_path))
    assert json.loads(Path(logged).read_text())["request"]["request_id"] == request.request_id
    again = takedown(stores, request, TEXT)  # a request run again: nothing more to retract or block
    assert (again.retraction, again.retracted_now, again.blocklist_added) == (report.retraction, 0, 0)

    # the next run trains batch 2: never a block holding its copy, by content
    retracted = _retracted(kafka, topic, report.retraction)
    job["partitions"] = ["b1", "b2"]
    assert _run_trainer(job, tmp_path)["status"] == "trained"
    _, steps_b = _steps(s3, bucket, lineage)
    trained_a, trained = _trained(steps_a), _trained(steps_b)
    batch_of = {key: m.batch for key, m in read_messages(kafka, topic, {(p, o) for p, o, _ in retracted}).items()}
    b2_copy = {a for a in retracted if batch_of[a[:2]] == "b2"}
    assert b2_copy and not trained & retracted
    passed = [(p, o, b) for per_step in steps_b["retracted"] for rows in per_step.values() for p, o, b, _ in rows]
    assert sorted(passed) == sorted(b2_copy)  # each passed over once, and recorded
    # the resume is exact: nothing trained twice, and every block trained or passed over but a last partial batch
    covered = len(trained_a) + len(trained) + len(b2_copy)
    assert not trained_a & trained and blocks["b1"] + blocks["b2"] - BATCH < covered <= blocks["b1"] + blocks["b2"]
    copy_hashes = set(_block_hashes(kafka, topic, b2_copy).values())
    assert not copy_hashes & set(_block_hashes(kafka, topic, trained).values())

    # a re-upload of the text (and of batch 2's copy) is dropped as blocked:<request>, and the counts add up
    three = _clean(s3, bucket, root, pg_url, "b3", [TEXT, SECOND, " ".join(_words(60, 90000))], blocklist)
    reasons = [r["reason"] for r in Corpus(s3, bucket, f"{root}/shards/").excluded("b3")]
    assert reasons == [f"blocked:{request.request_id}"] * 2
    assert dict(three.out.counts) == {"in": 3, "kept": 1, "dropped": 2, "quarantined": 0}
    stores.close()


def _retracted(kafka, topic: str, request_id: str) -> set[tuple[int, int, int]]:
    from pipeline_project.streaming.retractions.topic import read_retractions

    ranges = read_retractions(kafka, topic).requests[request_id].blocks
    return {(r.partition, r.offset, b) for r in ranges for b in range(r.first, r.end)}
