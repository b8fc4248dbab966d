"""Batches of raw S3 objects: the immutable manifest that defines one `raw_text` partition.

Plain Python over a boto3 client; the Dagster sensor and assets call into it. Import-light on purpose (the
sensor runs in the code server): the cleaning library is imported only where a batch is read.
"""

from __future__ import annotations

import functools
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


class UnsafeKeyError(IngestError, ValueError):
    """An S3 key that cannot become a local path safely (absolute, `..`, empty or odd components)."""


MANIFEST_PREFIX = "manifests/"
# Reasons `iter_batch_items` gives on top of the readers' (`cleaning.readers.REASONS`)
INGEST_REASONS = {
    "object_missing": "the object was deleted between the sensor's listing and the run (NoSuchKey)",
    "object_changed": "the object was overwritten after the manifest was written (another etag)",
    "object_access_denied": "S3 refuses this object to the pipeline's credentials (AccessDenied)",
    "object_archived": "the object is in an archive storage class and must be restored first (InvalidObjectState)",
    "object_unreadable": "the object's KMS key is disabled or gone, so S3 cannot decrypt it",
}
# S3 error codes that concern one object and do not heal by retrying: that object is quarantined with the reason,
# and the batch goes on. Every other error (SlowDown, 5xx, RequestTimeout, connection resets, and codes not named
# here) propagates: botocore and the asset's retry policy retry it, and once they give up the batch fails.
PER_OBJECT_ERRORS = {
    **dict.fromkeys(("NoSuchKey", "NoSuchVersion", "404", "NotFound"), "object_missing"),
    **dict.fromkeys(("PreconditionFailed", "412", "InvalidRange", "416"), "object_changed"),
    **dict.fromkeys(("AccessDenied", "AllAccessDisabled", "403"), "object_access_denied"),
    **dict.fromkeys(("InvalidObjectState", "ObjectNotInActiveTierError"), "object_archived"),
    **dict.fromkeys(
        ("KMS.DisabledException", "KMS.NotFoundException", "KMS.KMSInvalidStateException"), "object_unreadable"
    ),
}


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
    """Whether the readers have a format for the key: `cleaning.readers.SUPPORTED_SUFFIXES`, the one list."""
    from pipeline_project.cleaning.read.readers import is_supported as readers_support

    return readers_support(key)


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


# Raw objects are read in ranged GETs of this size: memory holds one block, a connection is never held open
# while the documents are cleaned, and a block whose body breaks off is asked for again.
BLOCK_BYTES = 8 * 1024 * 1024
_BODY_ATTEMPTS = 3


def _check_etag(bucket: str, obj: RawObject, resp: dict) -> None:
    etag = str(resp.get("ETag", "")).strip('"')
    if obj.etag and etag and etag != obj.etag:
        raise ObjectChangedError(
            f"s3://{bucket}/{obj.key} changed after batch manifest was written "
            f"(etag {etag} != {obj.etag}); upload changed data under a new key"
        )


def object_blocks(client, bucket: str, obj: RawObject, block_bytes: int | None = None) -> Iterator[bytes]:
    """The bytes of one object of a manifest, block by block (ranged GETs pinned to the manifest's etag with
    If-Match, so every block is of the version the manifest names; another raises ObjectChangedError or a 412).

    A body that breaks off mid-block (botocore's ResponseStreamingError) is asked for again, up to 3 times;
    request errors are botocore's own retries. An object of at most one block is one plain GET.
    """
    from botocore.exceptions import ResponseStreamingError

    block_bytes = block_bytes or BLOCK_BYTES
    pin = {"IfMatch": obj.etag} if obj.etag else {}
    size = obj.size
    starts = range(0, size, block_bytes) if size > block_bytes else [None]
    for start in starts:
        ranged = {} if start is None else {"Range": f"bytes={start}-{min(start + block_bytes, size) - 1}"}
        for attempt in range(1, _BODY_ATTEMPTS + 1):
            resp = client.get_object(Bucket=bucket, Key=obj.key, **pin, **ranged)
            _check_etag(bucket, obj, resp)
            try:
                block = resp["Body"].read()
                break
            except ResponseStreamingError:
                if attempt == _BODY_ATTEMPTS:
                    raise
        if start is not None and len(block) != min(block_bytes, size - start):
            raise ObjectChangedError(
                f"s3://{bucket}/{obj.key}: {len(block)} bytes at offset {start}, not the manifest's size {size}"
            )
        yield block


def _object_record(record_type, key: str, reason: str, detail: str):
    return record_type(id=key, source=key, reason=reason, detail=detail)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def iter_batch_items(client, manifest: BatchManifest, config) -> Iterator:
    """Every document (or quarantine record) of a batch, in manifest order; at least one record per object.

    An object with an unsupported suffix, one larger than `reader.max_decompressed_bytes`, or one that S3 refuses
    with a per-object, permanent error (`PER_OBJECT_ERRORS`: deleted since the sensor listed it, overwritten since
    the manifest was written, access denied, archived, its KMS key gone) becomes one quarantine record carrying
    the S3 error code, and the batch goes on. Objects are read in ranged blocks (`object_blocks`) and JSONL
    is parsed as the blocks arrive (`read_stream`); an object that changes or vanishes while it streams keeps
    the documents read before, and the rest of it is that one quarantine record. Other errors (throttling, 5xx,
    the network) propagate, so the asset's retry policy applies; `read_stream` itself never raises on input.
    """
    from pipeline_project.cleaning import Quarantined, read_stream

    limit = config.reader.max_decompressed_bytes
    for obj in manifest.objects:
        quarantine = functools.partial(_object_record, Quarantined, obj.key)
        if not is_supported(obj.key):
            yield quarantine("unsupported_format", "no reader for this suffix (readers.SUPPORTED_SUFFIXES)")
            continue
        if obj.size > limit:
            yield quarantine("object_too_large", f"{obj.size} bytes > {limit}")
            continue
        try:
            yield from read_stream(obj.key, object_blocks(client, manifest.bucket, obj), config)
        except ObjectChangedError as exc:
            yield quarantine("object_changed", str(exc))
        except client.exceptions.ClientError as exc:
            code = _error_code(exc) or ("NoSuchKey" if isinstance(exc, client.exceptions.NoSuchKey) else "")
            if code not in PER_OBJECT_ERRORS:
                raise
            yield quarantine(PER_OBJECT_ERRORS[code], f"s3://{manifest.bucket}/{obj.key}: {code}: {exc}")


def key_components(key: str) -> list[str]:
    """The `/`-separated components of an S3 key that is to become a relative local path.

    Raises UnsafeKeyError for an absolute key, a `.` / `..` / empty component, a backslash, or a NUL or other
    control character, so that no key can point outside the directory it is written under.
    """
    if not key or key.startswith("/"):
        raise UnsafeKeyError(f"key {key!r} is absolute or empty; it must be a relative path")
    if "\\" in key or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise UnsafeKeyError(f"key {key!r} holds a backslash or a control character")
    parts = key.split("/")
    bad = [p for p in parts if p in ("", ".", "..")]
    if bad:
        raise UnsafeKeyError(f"key {key!r} has a {bad[0]!r} component; keys must not climb out of their directory")
    return parts


def key_to_path(root, key: str):
    """`root / key` as a Path, refusing (UnsafeKeyError) any key that would land outside `root`."""
    from pathlib import Path

    base = Path(root).resolve()
    target = base.joinpath(*key_components(key))
    if not target.resolve().is_relative_to(base):
        raise UnsafeKeyError(f"key {key!r} resolves outside {base} (through a symlink)")
    return target
