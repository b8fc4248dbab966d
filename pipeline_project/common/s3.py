"""S3 keys and URIs: one parser of `s3://bucket/key`, and keys that may become local paths safely."""

from __future__ import annotations

from pathlib import Path


class InvalidS3UriError(ValueError):
    """Not an `s3://bucket/key` URI."""


class UnsafeKeyError(ValueError):
    """An S3 key that cannot become a local path safely (absolute, `..`, empty or odd components)."""


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`; InvalidS3UriError for anything else."""
    if not uri.startswith("s3://"):
        raise InvalidS3UriError(f"not an s3:// URI: {uri}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise InvalidS3UriError(f"no bucket in {uri}")
    return bucket, key


def key_in_bucket(uri: str, bucket: str) -> str:
    """The key (or prefix, its `/` kept) of a URI that must name something in `bucket`."""
    found, key = split_s3_uri(uri)
    if found != bucket:
        raise InvalidS3UriError(f"{uri} is not in bucket {bucket!r}")
    return key


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
    base = Path(root).resolve()
    target = base.joinpath(*key_components(key))
    if not target.resolve().is_relative_to(base):
        raise UnsafeKeyError(f"key {key!r} resolves outside {base} (through a symlink)")
    return target
