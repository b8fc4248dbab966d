"""Every record of a batch: the documents and quarantine records of each raw object its manifest names."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.read.readers import is_supported, read_stream
from pipeline_project.cleaning.records import Document, Quarantined
from pipeline_project.ingest.manifest import BatchManifest
from pipeline_project.ingest.objects import PER_OBJECT_ERRORS, ObjectChangedError, object_blocks


def _object_record(record_type, key: str, reason: str, detail: str):
    return record_type(id=key, source=key, reason=reason, detail=detail)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def iter_batch_items(client, manifest: BatchManifest, config: CleaningConfig) -> Iterator[Document | Quarantined]:
    """Every document (or quarantine record) of a batch, in manifest order; at least one record per object.

    An object with an unsupported suffix, one larger than `reader.max_decompressed_bytes`, or one that S3 refuses
    with a per-object, permanent error (`PER_OBJECT_ERRORS`: deleted since the sensor listed it, overwritten since
    the manifest was written, access denied, archived, its KMS key gone) becomes one quarantine record carrying
    the S3 error code, and the batch goes on. Objects are read in ranged blocks (`object_blocks`) and JSONL
    is parsed as the blocks arrive (`read_stream`); an object that changes or vanishes while it streams keeps
    the documents read before, and the rest of it is that one quarantine record. Other errors (throttling, 5xx,
    the network) propagate, so the asset's retry policy applies; `read_stream` itself never raises on input.
    """
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
