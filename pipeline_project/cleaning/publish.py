"""Publishing one cleaned batch to S3: shards, the exclusion sink, and a typed `ShardManifest`.

Layout under the bucket, for batch B:

    <shard_dir(B)>shard-00000.jsonl.zst ...   kept documents (see `shards.py`)
    <shard_dir(B)>manifest.json               the ShardManifest (written last: it names complete shards)
    <exclusions_dir(B)>excluded.jsonl.zst     every dropped and quarantined record, with step and reason

Shards and the exclusion sink are overwritten whole, so publishing a batch again is safe.
The cross-batch dedup index is stored by `load_index` / `save_index`.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass

import zstandard

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.dedup_index import DedupIndex
from pipeline_project.cleaning.pipeline import CleaningResult
from pipeline_project.cleaning.shards import write_shards

MANIFEST_NAME = "manifest.json"
EXCLUSIONS_NAME = "excluded.jsonl.zst"


@dataclass(frozen=True)
class ShardEntry:
    key: str
    docs: int
    raw_bytes: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ShardManifest:
    """What `cleaned_shards` wrote for one batch; `counts` add up: in == kept + dropped + quarantined."""

    batch_id: str
    config_version: int
    config_hash: str
    input_keys: tuple[str, ...]
    counts: dict[str, int]
    shards: tuple[ShardEntry, ...]
    exclusions: str

    @property
    def bytes_out(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def raw_bytes_kept(self) -> int:
        return sum(s.raw_bytes for s in self.shards)

    def to_json(self) -> bytes:
        payload = asdict(self)
        payload["input_keys"] = list(self.input_keys)
        payload["shards"] = [asdict(s) for s in self.shards]
        return json.dumps(payload, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ShardManifest:
        d = json.loads(data)
        return cls(
            batch_id=d["batch_id"],
            config_version=int(d["config_version"]),
            config_hash=d["config_hash"],
            input_keys=tuple(d["input_keys"]),
            counts={k: int(v) for k, v in d["counts"].items()},
            shards=tuple(ShardEntry(**s) for s in d["shards"]),
            exclusions=d["exclusions"],
        )


@dataclass(frozen=True)
class PublishedBatch:
    manifest: ShardManifest
    manifest_key: str
    manifest_sha256: str  # of the manifest bytes as stored: the content fingerprint downstream steps use


def _jsonl_zst(records: list[dict]) -> bytes:
    raw = io.BytesIO()
    for rec in records:
        raw.write(json.dumps(rec, ensure_ascii=False).encode())
        raw.write(b"\n")
    return zstandard.ZstdCompressor(level=3).compress(raw.getvalue())


def exclusion_records(result: CleaningResult) -> list[dict]:
    """One record per dropped or quarantined document, with the step and reason that removed it."""
    dropped = [
        {"id": d.id, "source": d.source, "kind": "dropped", "step": d.step, "reason": d.reason, "text": d.text}
        for d in result.dropped
    ]
    quarantined = [
        {"id": q.id, "source": q.source, "kind": "quarantined", "step": "read", "reason": q.reason, "detail": q.detail}
        for q in result.quarantined
    ]
    return dropped + quarantined


def manifest_key(shard_dir: str) -> str:
    return f"{shard_dir}{MANIFEST_NAME}"


def publish_batch(
    client,
    bucket: str,
    *,
    batch_id: str,
    shard_dir: str,
    exclusions_dir: str,
    result: CleaningResult,
    config: CleaningConfig,
    input_keys: list[str],
) -> PublishedBatch:
    """Write the shards, the exclusion sink and, last, the manifest of one cleaned batch."""
    entries = []
    for shard in write_shards(result.kept):
        key = f"{shard_dir}{shard.name}"
        client.put_object(Bucket=bucket, Key=key, Body=shard.data)
        entries.append(
            ShardEntry(
                key=key,
                docs=shard.docs,
                raw_bytes=shard.raw_bytes,
                bytes=len(shard.data),
                sha256=hashlib.sha256(shard.data).hexdigest(),
            )
        )
    exclusions_key = f"{exclusions_dir}{EXCLUSIONS_NAME}"
    client.put_object(Bucket=bucket, Key=exclusions_key, Body=_jsonl_zst(exclusion_records(result)))
    manifest = ShardManifest(
        batch_id=batch_id,
        config_version=config.version,
        config_hash=config.config_hash(),
        input_keys=tuple(input_keys),
        counts=dict(result.counts),
        shards=tuple(entries),
        exclusions=exclusions_key,
    )
    body = manifest.to_json()
    key = manifest_key(shard_dir)
    client.put_object(Bucket=bucket, Key=key, Body=body)
    return PublishedBatch(manifest=manifest, manifest_key=key, manifest_sha256=hashlib.sha256(body).hexdigest())


def read_shard_manifest(client, bucket: str, shard_dir: str) -> ShardManifest:
    return ShardManifest.from_json(client.get_object(Bucket=bucket, Key=manifest_key(shard_dir))["Body"].read())


def load_index(client, bucket: str, key: str) -> DedupIndex:
    """The cross-batch dedup index stored at `key`, or an empty one."""
    try:
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return DedupIndex()
    return DedupIndex.from_bytes(data)


def save_index(client, bucket: str, key: str, index: DedupIndex) -> None:
    client.put_object(Bucket=bucket, Key=key, Body=index.to_bytes())


def iter_shard_texts(client, bucket: str, manifest: ShardManifest):
    """The kept documents' texts of a published batch, shard by shard, in order."""
    from pipeline_project.cleaning.shards import read_shard

    for entry in manifest.shards:
        data = client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()
        for rec in read_shard(data):
            yield rec["text"]


def verify_published(client, bucket: str, manifest: ShardManifest) -> list[str]:
    """Problems with a published batch: a shard that is missing, differs from its sha256 or its document count."""
    from pipeline_project.cleaning.shards import read_shard

    problems = []
    for entry in manifest.shards:
        try:
            data = client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()
        except client.exceptions.NoSuchKey:
            problems.append(f"{entry.key}: missing")
            continue
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            problems.append(f"{entry.key}: sha256 differs")
            continue
        n = sum(1 for rec in read_shard(data) if isinstance(rec.get("text"), str))
        if n != entry.docs:
            problems.append(f"{entry.key}: {n} docs, manifest says {entry.docs}")
    return problems
