"""Publications kept addressable by content hash (`provenance.publications`) and the `pub` header that names
them, over an in-memory S3: the archive is written once, a produced publication keeps its objects when it is
superseded, and the catalog resolves a message's ordinals against the publication its header names (the current
manifest for a message without it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zstandard

from pipeline_project.cleaning.output.attributes import sha256
from pipeline_project.cleaning.output.publish import ShardEntry, ShardManifest, write_manifest
from pipeline_project.provenance.publications import (
    archive_publication,
    delete_superseded_unless_archived,
    publication_key,
    publication_manifest,
)
from pipeline_project.provenance.trace import DocumentCatalog, Message, ProvenanceError, _block
from pipeline_project.streaming.kafka.format import H_PUBLICATION, encode_message, read_header
from pipeline_project.streaming.kafka.spans import Span
from pipeline_project.streaming.produce.staging import MessageEncoder, StreamHasher
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

BUCKET, SHARD_DIR = "pipeline", "shards/b1/"
WHERE = dict(topic="t", partition=0, offset=7)


def _publish(client, attempt: str, texts: list[str]) -> ShardManifest:
    """A one-shard publication of `texts` under the attempt's prefix, its manifest the batch's current one."""
    raw = b"".join(
        (
            json.dumps({"id": f"raw/{attempt}.jsonl#{i + 1}", "text": t, "source": f"raw/{attempt}.jsonl"}) + "\n"
        ).encode()
        for i, t in enumerate(texts)
    )
    data = zstandard.ZstdCompressor(level=3).compress(raw)
    key = f"{SHARD_DIR}{attempt}/shard-00000.jsonl.zst"
    client.put_object(Bucket=BUCKET, Key=key, Body=data)
    client.put_object(Bucket=BUCKET, Key=f"{SHARD_DIR}{attempt}/excluded.jsonl.zst", Body=b"")
    manifest = ShardManifest(
        batch_id="b1",
        config_version=1,
        config_hash=f"cfg-{attempt}",
        input_keys=(f"raw/{attempt}.jsonl",),
        counts={"in": len(texts), "kept": len(texts), "dropped": 0, "quarantined": 0},
        shards=(ShardEntry(key=key, docs=len(texts), raw_bytes=len(raw), bytes=len(data), sha256=sha256(data)),),
        exclusions=f"{SHARD_DIR}{attempt}/excluded.jsonl.zst",
    )
    return write_manifest(client, BUCKET, SHARD_DIR, manifest).manifest


@pytest.fixture
def client():
    return MemoryS3Client({})


def test_the_pub_header_round_trips_and_is_optional():
    blocks = np.ones((2, 4), dtype=np.uint32)
    plain = dict(tokenizer_name="t", tokenizer_hash="h", source="b1")
    _, headers = encode_message(blocks, **plain, publication="abc")
    assert dict(headers)[H_PUBLICATION] == b"abc" and read_header(headers, **WHERE).publication == "abc"
    _, headers = encode_message(blocks, **plain)
    assert H_PUBLICATION not in dict(headers) and read_header(headers, **WHERE).publication is None
    with pytest.raises(ValueError, match="empty publication"):
        encode_message(blocks, **plain, publication="")
    with pytest.raises(Exception, match="empty publication header"):
        read_header([*headers, (H_PUBLICATION, b"")], **WHERE)


def test_the_producer_stamps_every_message_with_the_requests_content_hash():
    encoder = MessageEncoder(
        tokenizer_name="t", tokenizer_hash="h", source="b1", seq_len=4, hasher=StreamHasher(), publication="c0ffee"
    )
    staged = encoder((None, np.ones((3, 4), dtype=np.uint32)))
    assert read_header(staged.headers, **WHERE).publication == "c0ffee"


def test_the_archive_is_written_once_and_resolves_a_superseded_publication(client):
    old = _publish(client, "a1", ["one", "two", "three"])
    assert archive_publication(client, BUCKET, SHARD_DIR, old) == old.content_hash()
    assert publication_manifest(client, BUCKET, SHARD_DIR, old.content_hash()) == old  # current
    new = _publish(client, "a2", ["four", "five"])
    assert delete_superseded_unless_archived(client, BUCKET, SHARD_DIR, old, new) == 0  # produced: kept
    assert (BUCKET, old.shards[0].key) in client.objects
    assert publication_manifest(client, BUCKET, SHARD_DIR, old.content_hash()) == old  # archived
    assert publication_manifest(client, BUCKET, SHARD_DIR, new.content_hash()) == new
    assert publication_manifest(client, BUCKET, SHARD_DIR, None) == new  # no header: the current one
    assert publication_manifest(client, BUCKET, SHARD_DIR, "0" * 64) is None

    # the same content under other keys: the first copy stays (its shards are the ones kept)
    moved = old.model_copy(update={"shards": (old.shards[0].model_copy(update={"key": "elsewhere"}),)})
    archive_publication(client, BUCKET, SHARD_DIR, moved)
    stored = client.objects[(BUCKET, publication_key(SHARD_DIR, old.content_hash()))][0]
    assert ShardManifest.from_json(stored) == old


def test_a_publication_never_produced_is_deleted_when_superseded(client):
    old = _publish(client, "a1", ["one"])
    new = _publish(client, "a2", ["two"])
    assert delete_superseded_unless_archived(client, BUCKET, SHARD_DIR, old, new) == 2  # shard and sink
    assert (BUCKET, old.shards[0].key) not in client.objects


def _traced(catalog: DocumentCatalog, publication: str | None) -> dict:
    msg = Message(0, 7, "b1", None, 4, np.ones((1, 4), dtype=np.uint32), [Span(1, 0, 4, False)], publication)
    documents: dict = {}
    block = _block(msg, 0, catalog, documents)
    return {"block": block, "documents": documents}


def test_the_catalog_resolves_ordinals_against_the_publication_the_header_names(client):
    old = _publish(client, "a1", ["one", "two", "three"])
    archive_publication(client, BUCKET, SHARD_DIR, old)
    new = _publish(client, "a2", ["four", "five"])
    delete_superseded_unless_archived(client, BUCKET, SHARD_DIR, old, new)
    catalog = DocumentCatalog(client, BUCKET, "shards/")

    traced = _traced(catalog, old.content_hash())
    [(ref, doc)] = traced["documents"].items()
    assert ref == f"b1@{old.content_hash()[:16]}/1" and traced["block"]["publication"] == old.content_hash()
    assert (doc["id"], doc["publication"]) == ("raw/a1.jsonl#2", old.content_hash())
    assert catalog.text("b1", 1, old.content_hash()) == "two"

    [doc] = _traced(catalog, new.content_hash())["documents"].values()
    assert (doc["id"], catalog.text("b1", 1, new.content_hash())) == ("raw/a2.jsonl#2", "five")

    # without the header (produced before it was written): the current manifest, as before
    [(ref, doc)] = _traced(catalog, None)["documents"].items()
    assert ref == "b1/1" and doc["id"] == "raw/a2.jsonl#2" and doc["publication"] == new.content_hash()

    with pytest.raises(ProvenanceError, match="neither its current manifest nor archived"):
        _traced(catalog, "f" * 64)
