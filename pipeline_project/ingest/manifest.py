"""Batches of raw S3 objects: the immutable manifest that defines one `raw_text` partition.

Plain Python over a boto3 client; the Dagster sensor and assets call into it. Import-light on purpose: the
sensor runs in the code server. The objects are read by `ingest.objects` and `cleaning.read.batch`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field


class IngestError(Exception):
    """Base of the errors raised while planning or reading batches."""


class ManifestNotFoundError(IngestError, FileNotFoundError):
    """No manifest for the batch: the partition was added without the sensor writing one."""


MANIFEST_PREFIX = "manifests/"


class RawObject(BaseModel):
    """One raw object as the sensor listed it: a batch reads exactly this version (its ETag)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    etag: str
    size: int
    last_modified: str

    @classmethod
    def from_listing(cls, obj: dict) -> RawObject:
        lm = obj["LastModified"]
        return cls(
            key=obj["Key"],
            etag=str(obj.get("ETag", "")).strip('"'),
            size=int(obj.get("Size", 0)),
            last_modified=lm.isoformat() if isinstance(lm, datetime) else str(lm),
        )


class BatchManifest(BaseModel):
    """One `batches` partition: the raw objects it is made of, written once by the sensor, never changed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_id: str
    bucket: str
    objects: tuple[RawObject, ...]
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    @property
    def key(self) -> str:
        return manifest_key(self.batch_id)

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchManifest:
        return cls.model_validate_json(data)


def manifest_key(batch_id: str) -> str:
    return f"{MANIFEST_PREFIX}{batch_id}.json"


def make_batch_id(objects: list[RawObject]) -> str:
    """Deterministic in the objects, so a sensor that re-lists after a crash names the same batch."""
    digest = hashlib.sha256()
    for o in sorted(objects, key=lambda o: o.key):
        digest.update(f"{o.key}\0{o.etag}\0{o.size}\n".encode())
    newest = max(o.last_modified for o in objects)
    stamp = datetime.fromisoformat(newest).strftime("%Y%m%dT%H%M%S")
    return f"b{stamp}-{digest.hexdigest()[:10]}"


def write_manifest_once(client, manifest: BatchManifest) -> BatchManifest:
    """Manifests are immutable: an existing one with the same id wins and is returned."""
    try:
        existing = client.get_object(Bucket=manifest.bucket, Key=manifest.key)["Body"].read()
        return BatchManifest.from_json(existing)
    except client.exceptions.NoSuchKey:
        pass
    client.put_object(Bucket=manifest.bucket, Key=manifest.key, Body=manifest.to_json(), ContentType="application/json")
    return manifest


def read_manifest(client, bucket: str, batch_id: str) -> BatchManifest:
    try:
        body = client.get_object(Bucket=bucket, Key=manifest_key(batch_id))["Body"].read()
    except client.exceptions.NoSuchKey as exc:
        raise ManifestNotFoundError(
            f"no manifest s3://{bucket}/{manifest_key(batch_id)} for batch {batch_id!r}"
        ) from exc
    return BatchManifest.from_json(body)
