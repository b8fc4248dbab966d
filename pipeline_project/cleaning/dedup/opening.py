"""Open the cross-batch dedup index a deployment names: one PostgreSQL database, or its shards
(`cleaning.dedup.sharded`, `PIPELINE_DEDUP_SHARD_URLS`). Every writer and every command opens it here, so none of
them reaches only the first shard."""

from __future__ import annotations

from collections.abc import Sequence


def index_urls(postgres_url: str, shard_urls: Sequence[str] = ()) -> list[str]:
    """The databases that hold the index's rows: the shards when there are any, else `postgres_url`."""
    return list(shard_urls) or [postgres_url]


def open_index(postgres_url: str, shard_urls: Sequence[str] = (), **options):
    """A `PostgresDedupIndex` on the one database, or a `ShardedDedupIndex` over two or more shards. `options`: the
    index's keyword arguments (num_perm, num_bands, schema, is_published, wait_s, ...)."""
    urls = index_urls(postgres_url, shard_urls)
    if len(urls) > 1:
        from pipeline_project.cleaning.dedup.sharded import ShardedDedupIndex

        return ShardedDedupIndex(urls, **options)
    from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex

    return PostgresDedupIndex(urls[0], **options)
