"""Publications a message can name: a batch's shard manifests kept addressable by content hash once produced.

A batch's `manifest.json` is overwritten by a re-clean (after `ledger retire`) and by `retune --write`, and the
shards it named are then deleted (`publish.delete_superseded`). Blocks produced from the old publication stay in
the topic, and their `spans` header indexes the old publication's documents by ordinal; each message names that
publication in its `pub` header (`streaming.kafka.format.H_PUBLICATION`: the manifest's `content_hash`). So that
the header can be resolved later:

* before a batch is produced, its manifest is copied to `<shard_dir>publications/<content hash>.json`
  (`archive_publication`; content-addressed and written once: the first copy of a content hash stays, and
  names shards that are kept);
* a publication that was archived is superseded without deleting its shards, exclusion sink and attribute file
  (`delete_superseded_unless_archived`): they are what its blocks were made of;
* `publication_manifest` finds the manifest a content hash names: the current one when it has that hash, else
  the archived copy.

Messages without a `pub` header (produced before it was written) resolve against the current manifest, as they
always did: right until the batch is re-cleaned or rewritten, silently wrong after.
"""

from __future__ import annotations

from typing import Any

from pipeline_project.cleaning.output.publish import (
    ShardManifest,
    delete_superseded,
    read_shard_manifest_or_none,
)

PUBLICATIONS_DIR = "publications/"


def publication_key(shard_dir: str, content_hash: str) -> str:
    if not content_hash or "/" in content_hash:
        raise ValueError(f"not a content hash: {content_hash!r}")
    return f"{shard_dir}{PUBLICATIONS_DIR}{content_hash}.json"


def read_archived(client: Any, bucket: str, shard_dir: str, content_hash: str) -> ShardManifest | None:
    try:
        body = client.get_object(Bucket=bucket, Key=publication_key(shard_dir, content_hash))["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return ShardManifest.from_json(body)


def archive_publication(client: Any, bucket: str, shard_dir: str, manifest: ShardManifest) -> str:
    """Keep `manifest` addressable by its content hash (before its blocks are produced); returns the hash.
    Written once: a copy already there (the same content, perhaps under other shard keys) is kept."""
    content_hash = manifest.content_hash()
    if read_archived(client, bucket, shard_dir, content_hash) is None:
        client.put_object(Bucket=bucket, Key=publication_key(shard_dir, content_hash), Body=manifest.to_json())
    return content_hash


def is_archived(client: Any, bucket: str, shard_dir: str, manifest: ShardManifest | None) -> bool:
    """Whether `manifest`'s shards are an archived publication's (the archived copy names the same shards)."""
    if manifest is None:
        return False
    archived = read_archived(client, bucket, shard_dir, manifest.content_hash())
    return archived is not None and {s.key for s in archived.shards} == {s.key for s in manifest.shards}


def delete_superseded_unless_archived(
    client: Any, bucket: str, shard_dir: str, old: ShardManifest | None, new: ShardManifest
) -> int:
    """`publish.delete_superseded`, except for a publication that was produced (archived): its objects stay."""
    if is_archived(client, bucket, shard_dir, old):
        return 0
    return delete_superseded(client, bucket, old, new)


def publication_manifest(client: Any, bucket: str, shard_dir: str, content_hash: str | None) -> ShardManifest | None:
    """The manifest of the publication `content_hash` names (None: the current one, for a message without the
    header); None when neither the current manifest nor the archive holds it."""
    current = read_shard_manifest_or_none(client, bucket, shard_dir)
    if content_hash is None or (current is not None and current.content_hash() == content_hash):
        return current
    return read_archived(client, bucket, shard_dir, content_hash)
