"""Retune (issue 31 item 3): re-deciding cleaned batches from their attribute files on the shared stack's S3.

The same config changes nothing; a stricter one gives exactly what a full re-clean gives (the real cleaner run
twice), and `write_retuned` publishes it; a looser threshold or a changed signal setting is reported as
undecidable, never guessed; a produced batch is refused.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pytest

from pipeline_project.cleaning import CleaningConfig, publish, read_object
from pipeline_project.cleaning.batch_writer import BatchWriter
from pipeline_project.cleaning.publish import ShardEntry, ShardManifest, read_shard_manifest
from pipeline_project.cleaning.records import Document
from pipeline_project.cleaning.retune_write import RetuneRefusedError, check_writable
from pipeline_project.cleaning.shards import read_shard
from pipeline_project.cleaning.stream import StreamingCleaner
from pipeline_project.resources.layout import PipelineLayout
from pipeline_project.retune_cli import report, retune_batches

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
FILES = (
    "web_noisy/readability_testpages_wetlike.jsonl",
    "zh_classical/prose_guwen_sishu.jsonl",
    "code/psf__requests.jsonl",
)
BASE = CleaningConfig()
STRICT = CleaningConfig.model_validate(
    {
        "gopher_quality": {"min_doc_words": 150, "max_non_alpha_words_ratio": 0.85},
        "fineweb": {"line_punct_thr": 0.2},
        "gopher_repetition": {"top_n_grams": [[2, 0.15], [3, 0.18], [4, 0.16]]},
        "language": {"min_score": 0.8},
    }
)


def _items(config):
    items = []
    for name in FILES:
        path = CORPUS / name
        data = b"".join(path.read_bytes().splitlines(keepends=True)[:60])
        items += list(read_object(f"raw/{name}", data, config))
    copies = [copy.deepcopy(d) for d in items[:8] if isinstance(d, Document)]  # duplicates of documents that may change
    for d in copies:
        d.id += "-copy"
    return items + copies


def _clean(client, layout, batch, config):
    """Clean and publish one batch with the real streaming cleaner (chunks of 40)."""
    attempt = uuid.uuid4().hex[:8]
    writer = BatchWriter(client, layout.bucket, f"{layout.shard_dir(batch)}{attempt}/",
                         f"{layout.exclusions_dir(batch)}{attempt}/{publish.EXCLUSIONS_NAME}")  # fmt: skip
    cleaner = StreamingCleaner(config, chunk_docs=40)
    writer.attributes = cleaner.attribute_writer()
    records = publish.exclusion_recorder(config)
    out = cleaner.run(_items(config), batch, None, writer, records)
    cleaner.commit(out, None, writer, records)
    shards = writer.finish_shards()
    writer.upload_exclusions()
    manifest = ShardManifest(
        batch_id=batch, config_version=config.version, config_hash=config.config_hash(), input_keys=FILES,
        counts=dict(out.counts), shards=tuple(ShardEntry(s.key, s.docs, s.raw_bytes, s.bytes, s.sha256) for s in shards),
        exclusions=writer.exclusions_key, attributes=writer.attributes_key, attributes_sha256=writer.attributes_sha256,
    )  # fmt: skip
    publish.write_manifest(client, layout.bucket, layout.shard_dir(batch), manifest)
    return manifest


def _decisions(rows, batch):
    """{doc: (decision, step, reason)}, a duplicate's original named as in batch "b1"."""
    return {
        r["doc_id"]: (r["decision"], r["step"] or "", (r["reason"] or "").replace(f"{batch}/", "b1/")) for r in rows
    }


@pytest.fixture(scope="module")
def published(local_stack):
    settings = local_stack.settings()
    client = settings.s3_client()
    run = uuid.uuid4().hex[:8]
    layout = PipelineLayout(
        bucket=settings.bucket, shards_prefix=f"test-retune-{run}/shards/", exclusions_prefix=f"test-retune-{run}/x/"
    )
    _clean(client, layout, "b1", BASE)
    return client, layout


def test_the_same_config_changes_nothing(published):
    client, layout = published
    [result] = retune_batches(client, layout.bucket, layout, BASE, ["b1"], None)
    assert result.undecidable() == 0 and not result.changes() and not result.notes
    decisions = [r["decision"] for r in result.rows]
    assert decisions.count("kept") > 10 and decisions.count("dropped") > 10


def test_a_stricter_config_equals_a_full_re_clean_and_is_written(published):
    client, layout = published
    [result] = retune_batches(client, layout.bucket, layout, STRICT, ["b1"], None)
    assert result.undecidable() == 0
    moved = {k: n for k, n in result.changes().items() if k[1] == "kept -> dropped"}
    assert sum(moved.values()) >= 5, result.changes()
    retuned = {r["doc_id"]: (o.decision, o.step, o.reason) for r, o in zip(result.rows, result.outcomes)}
    reclean = _clean(client, layout, "b1-reclean", STRICT)
    table = publish_table(client, layout.bucket, reclean)
    assert retuned == _decisions(table, "b1-reclean")

    # --write: the batch is published again without the newly dropped documents, same as the re-clean's shards
    retune_batches(client, layout.bucket, layout, STRICT, ["b1"], {})
    manifest = read_shard_manifest(client, layout.bucket, layout.shard_dir("b1"))
    kept = [r["id"] for s in manifest.shards for r in read_shard(_get(client, layout.bucket, s.key))]
    assert kept == [r["id"] for s in reclean.shards for r in read_shard(_get(client, layout.bucket, s.key))]
    assert manifest.counts == reclean.counts and manifest.config_hash == STRICT.config_hash()
    assert manifest.retuned_from == BASE.config_hash()
    [again] = retune_batches(client, layout.bucket, layout, STRICT, ["b1"], None)
    assert not again.changes() and again.undecidable() == 0


def test_looser_or_reshaped_configs_are_reported_as_undecidable_and_not_written(published):
    client, layout = published
    looser = CleaningConfig.model_validate({"gopher_quality": {"min_doc_words": 10}})
    reshaped = CleaningConfig.model_validate({"fineweb": {"short_line_length": 20}})
    batch = "b1-reclean"  # the strict re-clean: not written by the test before
    [loose] = retune_batches(client, layout.bucket, layout, looser, [batch], None)
    assert loose.undecidable() > 0
    assert any(k[1] == "undecidable" and "signal not computed" in k[2] for k in loose.changes())
    with pytest.raises(RetuneRefusedError, match="need a re-clean"):
        retune_batches(client, layout.bucket, layout, looser, [batch], {})
    [shaped] = retune_batches(client, layout.bucket, layout, reshaped, [batch], None)
    assert any("fineweb: settings beyond thresholds changed" in n for n in shaped.notes)
    assert any("fineweb" in k[2] for k in shaped.changes() if k[1] == "undecidable")
    assert report([shaped])["undecidable"] == shaped.undecidable() > 0


def test_a_produced_batch_is_refused(published):
    client, layout = published
    with pytest.raises(RetuneRefusedError, match="already produced to Kafka"):
        retune_batches(client, layout.bucket, layout, STRICT, ["b1-reclean"], {"b1-reclean": "completed, 3 blocks"})
    [result] = retune_batches(client, layout.bucket, layout, STRICT, ["b1-reclean"], None)
    with pytest.raises(RetuneRefusedError, match="ledger retire b1-reclean"):
        check_writable(result, "partly produced, 1 blocks")


def _get(client, bucket, key):
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def publish_table(client, bucket, manifest):
    from pipeline_project.cleaning.attributes import read_attributes

    return read_attributes(_get(client, bucket, manifest.attributes))[0].to_pylist()
