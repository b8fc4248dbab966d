"""`why` and a takedown's target over published batches (stand-in S3 and dedup index, the blocks' lookup stubbed):
a document's decision in its batch, its copies kept and dropped in every batch; a source key's documents."""

from __future__ import annotations

import uuid

from pipeline_project.cleaning import Document
from pipeline_project.cleaning.attempt import BatchAttempt, clean_attempt
from pipeline_project.cleaning.dedup.blocklist import MemoryBlocklist
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.output import publish
from pipeline_project.ingest.manifest import BatchManifest, RawObject
from pipeline_project.ops.takedown import Stores, why
from pipeline_project.ops.takedown.apply import target_texts
from pipeline_project.ops.takedown.blocks import BlockHit, Located
from pipeline_project.ops.takedown.corpus import Corpus
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client
from pipeline_project_tests.operations.test_takedown_resolve import CFG, CONFIG, FIRST, OTHER, SECOND

FILLER = " ".join(f"word{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}x" for i in range(80))


def _published(client, index, batch: str, texts: list[str]) -> None:
    raw = RawObject(key=f"raw/{batch}.jsonl", etag="e", size=1, last_modified="2026-12-07T00:00:00+00:00")
    run = BatchAttempt(
        client=client, bucket="b", batch_id=batch, config=CONFIG,
        manifest=BatchManifest(batch_id=batch, bucket="b", objects=(raw,)), shard_dir=f"shards/{batch}/",
        exclusions_dir=f"exclusions/{batch}/", attempt=f"{batch}-{uuid.uuid4().hex[:6]}", max_shard_bytes=1 << 20,
        workers=0, chunk_docs=100, chunk_bytes=1 << 20,
    )  # fmt: skip
    docs = [Document(id=f"{raw.key}#{i + 1}", text=t, source=raw.key) for i, t in enumerate(texts)]
    clean_attempt(run, index, docs, publish.exclusion_recorder(CONFIG), lambda m: None)


def _stores() -> Stores:
    client = MemoryS3Client({})
    index = MemoryDedupIndex(num_perm=CFG.num_buckets * CFG.hashes_per_bucket, num_bands=CFG.num_buckets)
    _published(client, index, "b1", [FILLER, FIRST, FIRST, OTHER])
    _published(client, index, "b2", [SECOND])

    def locate(kafka, topic, corpus, ledger_index, copies):  # b1 produced (one block per kept copy), b2 not
        hits = [BlockHit(c.batch, c.doc_id, 0, 5, i, 7) for i, c in enumerate(copies) if c.batch == "b1"]
        return Located([h for h in hits if h.doc_id.endswith("#2")], ["b2"], [])

    return Stores(
        s3=client, bucket="b", kafka=None, topic="t", index=index, blocklist=MemoryBlocklist(), ledger_index=None,
        config=CONFIG, corpus=Corpus(client, "b", "shards/"), checkpoints_root="checkpoints", lineages=[],
        locate=locate,
    )  # fmt: skip


def test_why_a_dropped_document_names_its_reason_its_copies_and_their_blocks():
    stores = _stores()
    out = why(stores, "raw/b1.jsonl#3")
    assert out["records"] == [
        {"batch": "b1", "doc_id": "raw/b1.jsonl#3", "state": "dropped", "step": "exact_dedup",
         "reason": "exact_duplicate_of:b1/raw/b1.jsonl#2"}
    ]  # fmt: skip
    copies = {(c["batch"], c["doc_id"], c["state"], c["blocks"]) for c in out["copies"]}
    assert copies == {("b1", "raw/b1.jsonl#2", "kept", 1), ("b1", "raw/b1.jsonl#3", "dropped", 0)}
    assert [(b["batch"], b["block"]) for b in out["blocks"]] == [("b1", 0)]
    assert out["exposure"]["exposures"] == [] and out["exposure"]["checkpoints_read"] == 0


def test_a_source_key_resolves_to_every_document_of_the_object():
    stores = _stores()
    texts, own = target_texts(stores, "source", "raw/b1.jsonl")
    assert {c.doc_id for c in own} == {f"raw/b1.jsonl#{i}" for i in (1, 2, 3, 4)}
    assert {c.state for c in own if c.doc_id.endswith("#3")} == {"dropped"}
    assert len(texts) == 4  # the raw object is not in this S3: the published texts stand for it
    kept = why(stores, "raw/b2.jsonl")["records"]
    assert kept == [{"batch": "b2", "doc_id": "raw/b2.jsonl#1", "state": "kept", "step": "", "reason": ""}]


def test_the_cli_wants_one_target_and_prints_the_report(capsys):
    from typer.testing import CliRunner

    from pipeline_project.cli.app import app
    from pipeline_project.cli.takedown import print_report
    from pipeline_project.ops.takedown.report import (
        CopyRow,
        ExposureReport,
        ExposureRow,
        LineageExposure,
        TakedownRequest,
    )

    result = CliRunner().invoke(app, ["takedown", "--request", "r1", "--reason", "x"], prog_name="pipeline-project")
    assert result.exit_code == 1 and "error: give exactly one of --source, --doc, --text" in result.output
    request = TakedownRequest(request_id="r1", reason="erasure", target_kind="text", target="t.txt")
    exposure = ExposureRow(lineage="lin", checkpoint="s3://b/c/lin/step-4-ab/", step=3, rank=1, partition=0,
                           offset=7, block=2, batch="b1", doc_id="raw/b1#2", tokens=12)  # fmt: skip
    report = ExposureReport(
        request=request, fingerprints=1, blocks=1, retraction="takedown:r1", retracted_now=1, blocklist_added=2,
        copies=[CopyRow(batch="b1", doc_id="raw/b1#2", kind="near", similarity=0.76, state="kept", blocks=1,
                        produced=True)],
        unproduced_batches=["b2"], exposures=[exposure], checkpoints_read=2, first_checkpoint=exposure.checkpoint,
        lineages=[LineageExposure(lineage="lin", first_checkpoint=exposure.checkpoint, first_step=3, steps=1,
                                  ranks=[1], tokens=12)],
        report_uri="s3://b/takedowns/r1/report.json",
    )  # fmt: skip
    print_report(report)
    out = capsys.readouterr().out
    assert "kept     near  0.76  b1/raw/b1#2  1 blocks" in out
    assert "lin: first at step 3 (s3://b/c/lin/step-4-ab/), 1 steps, ranks [1], 12 tokens" in out
    assert "step 3 rank 1: 0@7 block 2, 12 tokens" in out and "not produced yet" in out
