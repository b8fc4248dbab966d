"""Retune (issue 31 item 3): re-deciding cleaned batches from their attribute files on the shared stack's S3.

The same config changes nothing; a stricter one gives exactly what a full re-clean gives (the real cleaner run
twice), and `write_retuned` publishes it; a looser threshold or a changed signal setting is reported as
undecidable, never guessed; a produced batch is refused without a retraction strategy (`ops.retune` retracts:
test_retune_produced.py). A new benchmark re-checks the cleaned text: the report
names exactly the planted documents and the batches already in the topic, and `--write` equals a re-clean.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from pipeline_project.cleaning import CleaningConfig, read_object
from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex
from pipeline_project.cleaning.output import publish
from pipeline_project.cleaning.output.publish import ShardEntry, ShardManifest, read_shard_manifest
from pipeline_project.cleaning.output.shards import read_shard
from pipeline_project.cleaning.output.writer import BatchWriter
from pipeline_project.cleaning.records import Document
from pipeline_project.cleaning.retune.write import RetuneRefusedError, check_writable
from pipeline_project.cleaning.stream import StreamingCleaner
from pipeline_project.cli.retune import print_report
from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig
from pipeline_project.ops.retune import known_state, report, retune_batches, run_retune
from pipeline_project.streaming.produce.request import ProduceRequest
from pipeline_project_tests.cleaning.conftest import prose

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


def _clean(client, layout, batch, config, items=None, index=None):
    """Clean and publish one batch with the real streaming cleaner (chunks of 40); with `index` (PostgreSQL), as
    the asset does: reserve the kept documents as an attempt, write the manifest naming it, publish it."""
    attempt = uuid.uuid4().hex[:8]
    if index is not None:
        index.begin_batch(batch)
    writer = BatchWriter(client, layout.bucket, f"{layout.shard_dir(batch)}{attempt}/",
                         f"{layout.exclusions_dir(batch)}{attempt}/{publish.EXCLUSIONS_NAME}")  # fmt: skip
    cleaner = StreamingCleaner(config, chunk_docs=40)
    writer.attributes = cleaner.attribute_writer()
    records = publish.exclusion_recorder(config)
    out = cleaner.run(_items(config) if items is None else items, batch, index, writer, records)
    dedup_attempt = f"{batch}:{attempt}" if index is not None else ""
    cleaner.commit(out, index, writer, records, attempt=dedup_attempt or None)
    shards = writer.finish_shards()
    writer.upload_exclusions()
    manifest = ShardManifest(
        batch_id=batch, config_version=config.version, config_hash=config.config_hash(), input_keys=FILES,
        counts=dict(out.counts), shards=tuple(ShardEntry(key=s.key, docs=s.docs, raw_bytes=s.raw_bytes, bytes=s.bytes, sha256=s.sha256) for s in shards),
        exclusions=writer.exclusions_key, attributes=writer.attributes_key, attributes_sha256=writer.attributes_sha256,
        dedup_attempt=dedup_attempt,
    )  # fmt: skip
    publish.write_manifest(client, layout.bucket, layout.shard_dir(batch), manifest)
    if index is not None:
        index.publish(dedup_attempt)
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
    _clean(client, layout, "b1-strict", STRICT)  # for the tests that read a strict batch, whichever runs first
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
    [written] = retune_batches(client, layout.bucket, layout, STRICT, ["b1"], known_state({}))
    assert written.written and not written.refused
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
    batch = "b1-strict"  # cleaned strict, never written by a retune
    [loose] = retune_batches(client, layout.bucket, layout, looser, [batch], None)
    assert loose.undecidable() > 0
    assert any(k[1] == "undecidable" and "signal not computed" in k[2] for k in loose.changes())
    [refused] = retune_batches(client, layout.bucket, layout, looser, [batch], known_state({}))
    assert "need a re-clean" in refused.refused and not refused.written
    [shaped] = retune_batches(client, layout.bucket, layout, reshaped, [batch], None)
    assert any("fineweb: settings beyond thresholds changed" in n for n in shaped.notes)
    assert any("fineweb" in k[2] for k in shaped.changes() if k[1] == "undecidable")
    assert report([shaped])["undecidable"] == shaped.undecidable() > 0


def test_a_produced_batch_is_refused(published):
    client, layout = published
    [refused] = retune_batches(
        client, layout.bucket, layout, STRICT, ["b1-strict"], known_state({"b1-strict": "completed, 3 blocks"})
    )
    assert "already produced to Kafka" in refused.refused and not refused.written
    [result] = retune_batches(client, layout.bucket, layout, STRICT, ["b1-strict"], None)
    with pytest.raises(RetuneRefusedError, match="ledger retire b1-strict"):
        check_writable(result, "partly produced, 1 blocks")


def _planted(tmp_path):
    """Documents with planted contamination (verbatim, whitespace-changed, embedded) and a near miss; the config
    that adds their benchmark."""
    bench = [prose(8, seed=500), prose(6, seed=501), prose(4, seed=502)]
    path = tmp_path / "planted.jsonl"
    path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(bench)))
    words = bench[0].split()
    docs = {
        "verbatim": bench[0],
        "spaced": "\n\n".join("\t" + "  ".join(line.split()) for line in bench[1].splitlines()),
        "embedded": f"{prose(8, seed=11)}\n{bench[2]}\n{prose(8, seed=12)}",
        "near": f"{prose(8, seed=13)}\nMoreover {' '.join(words[20:32])} moreover.\n{prose(8, seed=14)}",
    }
    docs.update({f"clean{i}": prose(10, seed=20 + i) for i in range(6)})
    data = "".join(json.dumps({"text": t, "name": k}) + "\n" for k, t in docs.items()).encode()
    new = CleaningConfig.model_validate(
        {
            "decontamination": {
                "enabled": True,
                "benchmarks": [{"name": "planted", "path": str(path), "fields": ["text"]}],
            }
        }
    )
    return data, list(docs), new


def test_a_new_benchmark_names_the_planted_documents_and_the_produced_batches(local_stack, pg_url, tmp_path, capsys):
    settings = local_stack.settings()
    client = settings.s3_client()
    run = uuid.uuid4().hex[:8]
    layout = PipelineLayout(
        bucket=settings.bucket,
        shards_prefix=f"test-retune-{run}/shards/",
        exclusions_prefix=f"test-retune-{run}/x/",
        topic=TopicConfig(name=f"test-retune-{run}"),
    )
    data, names, new = _planted(tmp_path)
    mh = BASE.dedup.minhash
    index = PostgresDedupIndex(pg_url, num_perm=mh.num_buckets * mh.hashes_per_bucket, num_bands=mh.num_buckets)
    for batch, into in (("fresh", index), ("produced", None)):
        _clean(client, layout, batch, BASE, list(read_object(f"raw/{batch}.jsonl", data, BASE)), into)
    _produce_ledger_entry(settings, layout.topic.name, "produced")
    planted = {
        f"raw/{b}.jsonl:{names.index(d) + 1}" for b in ("fresh", "produced") for d in ("verbatim", "spaced", "embedded")
    }

    out = run_retune(settings, layout, new, None, write=True, dedup_url=pg_url)
    assert out["undecidable"] == 0 and out["batches"] == ["fresh", "produced"]
    assert {f"{a['source']}:{a['record']}" for a in out["affected"]} == planted, out["affected"]
    assert {a["benchmark"] for a in out["affected"]} == {"planted"}
    assert out["affected_batches"]["fresh"] == "" and out["affected_batches"]["produced"].startswith("completed")
    # the topic holds a publication of "produced" that is not its manifest (content "h"): nothing to retract by
    # (a produced publication is retracted from and written: test_retune_produced.py)
    assert out["written"] == ["fresh"] and "neither its current manifest nor archived" in out["refused"]["produced"]
    print_report(out, write=True)
    text = capsys.readouterr().out
    assert "batch produced: 3 affected, already in the topic (completed" in text and "written: fresh" in text

    # the written batch equals a full re-clean with the benchmark on
    reclean = _clean(client, layout, "reclean", new, list(read_object("raw/fresh.jsonl", data, new)))
    written = read_shard_manifest(client, layout.bucket, layout.shard_dir("fresh"))
    assert _decisions(publish_table(client, layout.bucket, written), "fresh") == _decisions(
        publish_table(client, layout.bucket, reclean), "reclean"
    )
    assert _ids(client, layout.bucket, written) == _ids(client, layout.bucket, reclean)

    # the documents the retune dropped left the dedup index: a later batch's copies of them are not dropped as
    # duplicates of something no longer kept; its copies of what is still kept are
    _clean(client, layout, "later", BASE, list(read_object("raw/later.jsonl", data, BASE)), index)
    later = {r["doc_id"]: r for r in publish_table(client, layout.bucket, _manifest(client, layout, "later"))}
    dups = {d: later[f"raw/later.jsonl#{names.index(d) + 1}"]["reason"] or "" for d in names}
    assert {d for d, reason in dups.items() if "duplicate_of:fresh/" in reason} == set(names) - {
        "verbatim",
        "spaced",
        "embedded",
    }, dups
    index.close()


def _produce_ledger_entry(settings, topic, batch):
    import numpy as np

    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.kafka.topics import ensure_topic
    from pipeline_project.streaming.produce.producer import produce_blocks

    kafka = KafkaSettings.from_settings(settings)
    ensure_topic(kafka.make_admin(), topic, partitions=1)
    tok = type("Tok", (), {"name": "unit-tok", "hash": "deadbeef"})
    blocks = np.zeros((3, 16), dtype=np.uint32)
    produce_blocks(
        kafka,
        ProduceRequest(topic=topic, ledger_key=batch, content_hash="h", source=batch, seq_len=16, tokenizer=tok),
        [blocks],
    )


def _manifest(client, layout, batch):
    return read_shard_manifest(client, layout.bucket, layout.shard_dir(batch))


def _ids(client, bucket, manifest):
    return [r["id"] for s in manifest.shards for r in read_shard(_get(client, bucket, s.key))]


def _get(client, bucket, key):
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def publish_table(client, bucket, manifest):
    from pipeline_project.cleaning.output.attributes import read_attributes

    return read_attributes(_get(client, bucket, manifest.attributes))[0].to_pylist()


def test_retune_write_refuses_a_batch_produced_after_the_report_read_it(local_stack, pg_url, monkeypatch):
    """Issue 37 finding 1: `retune --write` read "produced or not" once, before its loop; a batch `token_blocks`
    produced meanwhile had its manifest rewritten and its shards deleted under the blocks in the topic."""
    from pipeline_project.ops import retune as ops_retune

    settings = local_stack.settings()
    settings = dataclasses.replace(settings, postgres_url=pg_url)
    client = settings.s3_client()
    run = uuid.uuid4().hex[:8]
    layout = PipelineLayout(bucket=settings.bucket, shards_prefix=f"test-race-{run}/shards/",
                            exclusions_prefix=f"test-race-{run}/x/", topic=TopicConfig(name=f"test-race-{run}"))  # fmt: skip
    _clean(client, layout, "b1", BASE)
    before = _manifest(client, layout, "b1")
    real = ops_retune.produced_state
    calls = []

    def token_blocks_produces_it_meanwhile(settings, topic, batches):
        calls.append(list(batches))
        if len(calls) == 1:  # the read the report starts from: not produced yet ...
            _produce_ledger_entry(settings, topic, "b1")  # ... and token_blocks produces it right after
            return {}
        return real(settings, topic, batches)

    monkeypatch.setattr(ops_retune, "produced_state", token_blocks_produces_it_meanwhile)
    monkeypatch.setattr(ops_retune, "ledger_guard", _first_read_then_guard(ops_retune), raising=False)
    out = run_retune(settings, layout, STRICT, ["b1"], write=True, dedup_url=pg_url)
    # produced meanwhile with content it cannot place ("h"): refused, not overwritten
    assert out["written"] == [] and "neither its current manifest nor archived" in out["refused"]["b1"]
    assert _manifest(client, layout, "b1") == before  # the manifest under the produced blocks is untouched
    assert publish_verify(client, layout.bucket, before) == []  # and every shard it names is still there


def _first_read_then_guard(ops_retune):
    """Today's order: the ledger state is read before the loop (the first `produced_state` call), and the guard
    reads it again under the batch's lock."""
    real_guard = getattr(ops_retune, "ledger_guard", None)

    def guard_factory(settings_, topic):
        ops_retune.produced_state(settings_, topic, ["b1"])  # the report's read, before any write
        return real_guard(settings_, topic)

    return guard_factory


def publish_verify(client, bucket, manifest):
    from pipeline_project.cleaning.output.publish import verify_published

    return verify_published(client, bucket, manifest)
