"""Publishing one cleaned batch to S3: shards, the exclusion sink, and a typed `ShardManifest`.

Layout under the bucket, for batch B:

    <shard_dir(B)>shard-00000.jsonl.zst ...   kept documents (see `shards.py`)
    <shard_dir(B)>manifest.json               the ShardManifest (written last: it names complete shards)
    <exclusions_dir(B)>excluded.jsonl.zst     every dropped and quarantined record, with step and reason

Shards and the exclusion sink are overwritten whole, so publishing a batch again is safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from pipeline_project.cleaning.chain.sink_mask import sink_mask
from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.records import MAX_DETAIL_CHARS, Dropped, Quarantined

MANIFEST_NAME = "manifest.json"
EXCLUSIONS_NAME = "excluded.jsonl.zst"


class ShardEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    docs: int
    raw_bytes: int
    bytes: int
    sha256: str


class ShardManifest(BaseModel):
    """What `cleaned_shards` wrote for one batch; `counts` add up: in == kept + dropped + quarantined."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_id: str
    config_version: int
    config_hash: str
    input_keys: tuple[str, ...]
    counts: dict[str, int]
    shards: tuple[ShardEntry, ...]
    exclusions: str
    dedup_attempt: str = ""  # the dedup index attempt whose rows hold this publication's documents
    attributes: str = ""  # key of the per-document attribute file (`attributes.py`), "" for older batches
    attributes_sha256: str = ""
    retuned_from: str = ""  # config hash of the publication a `retune --write` derived this one from

    @property
    def bytes_out(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def raw_bytes_kept(self) -> int:
        return sum(s.raw_bytes for s in self.shards)

    def content_hash(self) -> str:
        """Fingerprint of what the batch holds: config, counts and shard contents, not where the shards are.

        A re-run that keeps the same documents writes byte-identical shards (deterministic JSON and zstd), so
        it has the same content hash under another attempt's keys; the token ledger records this hash.
        """
        payload = {
            "config_hash": self.config_hash,
            "counts": dict(sorted(self.counts.items())),
            "shards": [[s.docs, s.raw_bytes, s.sha256] for s in self.shards],
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ShardManifest:
        """Older manifests lack the fields added since (dedup_attempt, attributes, ...): their defaults."""
        return cls.model_validate_json(data)


@dataclass(frozen=True)
class PublishedBatch:
    manifest: ShardManifest
    manifest_key: str
    manifest_sha256: str  # of the manifest bytes as stored: the content fingerprint downstream steps use


def exclusion_records_of(dropped: list[Dropped], quarantined: list[Quarantined], config: CleaningConfig) -> list[dict]:
    """One record per dropped or quarantined document, with the step and reason that removed it.

    The sink keeps nothing in clear that the shards mask: a dropped document's text is masked by its profile's
    masking step with the same config (`sink_mask`), whichever step dropped it (a pool worker may have masked it
    already, `Dropped.masked_text`); a quarantine detail gets every masking step that is on, and is cut short
    (`records.MAX_DETAIL_CHARS`).
    """
    return [
        {
            "id": d.id,
            "source": d.source,
            "kind": "dropped",
            "step": d.step,
            "reason": d.reason,
            "text": sink_mask(d.text, config, d.meta.get("domain")) if d.masked_text is None else d.masked_text,
        }
        for d in dropped
    ] + [
        {
            "id": q.id,
            "source": q.source,
            "kind": "quarantined",
            "step": "read",
            "reason": q.reason,
            "detail": sink_mask(q.detail, config, None)[:MAX_DETAIL_CHARS],
        }
        for q in quarantined
    ]


def exclusion_recorder(config: CleaningConfig) -> Callable[[list[Dropped], list[Quarantined]], list[dict]]:
    """`exclusion_records_of` bound to a config: the `exclusion_records` callable `stream.StreamingCleaner` takes."""
    return lambda dropped, quarantined: exclusion_records_of(dropped, quarantined, config)


def manifest_key(shard_dir: str) -> str:
    return f"{shard_dir}{MANIFEST_NAME}"


def read_shard_manifest(client, bucket: str, shard_dir: str) -> ShardManifest:
    return ShardManifest.from_json(client.get_object(Bucket=bucket, Key=manifest_key(shard_dir))["Body"].read())


def iter_shard_texts(client, bucket: str, manifest: ShardManifest):
    """The kept documents' texts of a published batch, shard by shard, in order."""
    from pipeline_project.cleaning.output.shards import read_shard

    for entry in manifest.shards:
        data = client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()
        for rec in read_shard(data):
            yield rec["text"]


def iter_shard_documents(client, bucket: str, manifest: ShardManifest):
    """(domain, text) of the kept documents of a published batch, in order; domain None in shards without one."""
    from pipeline_project.cleaning.output.shards import read_shard

    for entry in manifest.shards:
        data = client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()
        for rec in read_shard(data):
            yield rec.get("domain") or None, rec["text"]


def verify_published(client, bucket: str, manifest: ShardManifest) -> list[str]:
    """Problems with a published batch: a shard that is missing, differs from its sha256 or its document count."""
    from pipeline_project.cleaning.output.shards import read_shard

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


def write_manifest(client, bucket: str, shard_dir: str, manifest: ShardManifest) -> PublishedBatch:
    """Write the manifest that names a batch's shards (the last write of a publication)."""
    body = manifest.to_json()
    key = manifest_key(shard_dir)
    client.put_object(Bucket=bucket, Key=key, Body=body)
    return PublishedBatch(manifest=manifest, manifest_key=key, manifest_sha256=hashlib.sha256(body).hexdigest())


def read_published(client, bucket: str, shard_dir: str, attempt: str) -> PublishedBatch | None:
    """The batch's stored publication when its manifest names `attempt`, else None; raises when S3 does not
    answer (then nobody knows whether the attempt's manifest was written)."""
    key = manifest_key(shard_dir)
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    manifest = ShardManifest.from_json(body)
    if manifest.dedup_attempt != attempt:
        return None
    return PublishedBatch(manifest=manifest, manifest_key=key, manifest_sha256=hashlib.sha256(body).hexdigest())


def read_shard_manifest_or_none(client, bucket: str, shard_dir: str) -> ShardManifest | None:
    try:
        return read_shard_manifest(client, bucket, shard_dir)
    except client.exceptions.NoSuchKey:
        return None


def manifest_names_attempt(client, bucket: str, shard_dir: Callable[[str], str]) -> Callable[[str, str], bool]:
    """`is_published(batch_id, attempt)` for the dedup index: whether the batch's manifest names the attempt."""

    def is_published(batch_id: str, attempt: str) -> bool:
        manifest = read_shard_manifest_or_none(client, bucket, shard_dir(batch_id))
        return manifest is not None and manifest.dedup_attempt == attempt

    return is_published


def delete_superseded(client, bucket: str, old: ShardManifest | None, new: ShardManifest) -> int:
    """Delete the objects of a previous publication that the new manifest no longer names (best effort)."""
    if old is None:
        return 0
    keep = {s.key for s in new.shards} | {new.exclusions, new.attributes}
    stale = [s.key for s in old.shards if s.key not in keep] + [
        k for k in (old.exclusions, old.attributes) if k and k not in keep
    ]
    for key in stale:
        client.delete_object(Bucket=bucket, Key=key)
    return len(stale)
