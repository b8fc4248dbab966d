"""Reading the raw objects a batch manifest names: ranged GETs pinned to the manifest's ETag, and the S3 errors
that concern one object (it is quarantined) rather than the batch (it is retried)."""

from __future__ import annotations

from collections.abc import Iterator

from pipeline_project.ingest.manifest import IngestError, RawObject


class ObjectChangedError(IngestError):
    """An object of a manifest was overwritten after the manifest was written."""


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
