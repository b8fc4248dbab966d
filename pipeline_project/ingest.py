"""Batches of raw S3 objects: the immutable manifest that defines one `raw_text` partition.

Plain Python over a boto3 client; the Dagster sensor and assets call into it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone


class IngestError(Exception):
    """Base of the errors raised while planning or reading batches."""


class ManifestNotFoundError(IngestError, FileNotFoundError):
    """No manifest for the batch: the partition was added without the sensor writing one."""


class ObjectChangedError(IngestError):
    """An object of a manifest was overwritten after the manifest was written."""


SUPPORTED_SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".json.gz", ".jsonl.gz", ".jsonl.zst", ".html")
MANIFEST_PREFIX = "manifests/"


@dataclass(frozen=True)
class RawObject:
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


@dataclass(frozen=True)
class BatchManifest:
    batch_id: str
    bucket: str
    objects: tuple[RawObject, ...]
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    @property
    def key(self) -> str:
        return manifest_key(self.batch_id)

    def to_json(self) -> bytes:
        payload = asdict(self)
        payload["objects"] = [asdict(o) for o in self.objects]
        return json.dumps(payload, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchManifest:
        d = json.loads(data)
        return cls(
            batch_id=d["batch_id"],
            bucket=d["bucket"],
            objects=tuple(RawObject(**o) for o in d["objects"]),
            created_at=d["created_at"],
        )


def is_supported(key: str) -> bool:
    return key.lower().endswith(SUPPORTED_SUFFIXES)


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


def fetch_object(client, bucket: str, obj: RawObject) -> bytes:
    """Read one object of a manifest, refusing it if it changed since the manifest was written."""
    resp = client.get_object(Bucket=bucket, Key=obj.key)
    etag = str(resp.get("ETag", "")).strip('"')
    if obj.etag and etag and etag != obj.etag:
        raise ObjectChangedError(
            f"s3://{bucket}/{obj.key} changed after batch manifest was written "
            f"(etag {etag} != {obj.etag}); upload changed data under a new key"
        )
    return resp["Body"].read()


# S3 LastModified has one-second resolution, and an object can land in the same second as the
# newest one a tick has already seen. The cursor therefore keeps the keys it saw near its edge
# and each listing starts a little before it.
CURSOR_MARGIN_S = 2.0


@dataclass(frozen=True)
class SensorCursor:
    since: str | None = None
    edge_keys: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"since": self.since, "edge_keys": list(self.edge_keys)})

    @classmethod
    def from_json(cls, raw: str | None) -> SensorCursor:
        if not raw:
            return cls()
        d = json.loads(raw)
        return cls(since=d.get("since"), edge_keys=tuple(d.get("edge_keys", ())))

    def list_since(self) -> datetime | None:
        if self.since is None:
            return None
        from datetime import timedelta

        return datetime.fromisoformat(self.since) - timedelta(seconds=CURSOR_MARGIN_S)


def plan_batch(listing: list[dict], cursor: SensorCursor, max_objects: int) -> tuple[list[RawObject], SensorCursor]:
    """Pick the next batch from an S3 listing (oldest first) and advance the cursor past it."""
    objects = [RawObject.from_listing(o) for o in listing if not o["Key"].endswith("/")]
    seen = set(cursor.edge_keys)
    fresh = sorted((o for o in objects if o.key not in seen), key=lambda o: (o.last_modified, o.key))
    taken = fresh[:max_objects]
    if not taken:
        return [], cursor
    since = max([taken[-1].last_modified] + ([cursor.since] if cursor.since else []))
    edge_from = datetime.fromisoformat(since).timestamp() - CURSOR_MARGIN_S
    known = [o for o in objects if o.key in seen] + taken
    edge = sorted({o.key for o in known if datetime.fromisoformat(o.last_modified).timestamp() >= edge_from})
    return taken, SensorCursor(since=since, edge_keys=tuple(edge))


def iter_batch_items(client, manifest: BatchManifest, config) -> Iterator:
    """Every document (or quarantine record) of a batch, in manifest order.

    An object with an unsupported suffix, or one overwritten since the manifest was written,
    becomes one quarantine record, so the batch's counts still account for it. Network errors
    propagate, for the asset's retry policy.
    """
    from pipeline_project.cleaning import Quarantined, read_object

    for obj in manifest.objects:
        if not is_supported(obj.key):
            yield Quarantined(
                id=obj.key,
                source=obj.key,
                reason="unsupported_format",
                detail=f"suffix not one of {', '.join(SUPPORTED_SUFFIXES)}",
            )
            continue
        try:
            data = fetch_object(client, manifest.bucket, obj)
        except ObjectChangedError as exc:
            yield Quarantined(id=obj.key, source=obj.key, reason="object_changed", detail=str(exc))
            continue
        yield from read_object(obj.key, data, config)
