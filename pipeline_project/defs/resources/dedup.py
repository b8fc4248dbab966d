"""The cross-batch dedup index as a Dagster resource: a PostgreSQL database (`cleaning.dedup.postgres`), or several
(`cleaning.dedup.sharded`: the index split by exact-key hash, `PIPELINE_DEDUP_SHARD_URLS`)."""

from __future__ import annotations

import dagster as dg
from pydantic import Field


class DedupIndexResource(dg.ConfigurableResource):
    """`postgres_url` is a libpq URL; keep the password out of it in deployments (PGPASSWORD in the environment)."""

    postgres_url: str
    shard_urls: list[str] = Field(default_factory=list)
    """The index's shards, in a fixed order, when it is split across PostgreSQL servers (two or more URLs; one URL:
    the single index there; none: the single index in `postgres_url`). The blocklist stays in `postgres_url`."""

    schema_name: str = "dedup"
    """The PostgreSQL schema that holds this deployment's index (one database can serve several)."""

    wait_s: float = 600.0
    """How long a batch waits for a concurrent batch that holds the same new documents to publish or die."""

    def open(self, num_perm: int, num_bands: int, is_published=None):
        """`is_published(batch_id, attempt)`: whether the batch's manifest names the attempt (resolves dead ones)."""
        from pipeline_project.cleaning.dedup.opening import open_index

        return open_index(
            self.postgres_url,
            self.shard_urls,
            num_perm=num_perm,
            num_bands=num_bands,
            schema=self.schema_name,
            is_published=is_published,
            wait_s=self.wait_s,
        )

    def blocklist(self):
        """The takedown blocklist beside the index (same database and schema), which the cleaning consults."""
        from pipeline_project.cleaning.dedup.blocklist import PostgresBlocklist

        return PostgresBlocklist(self.postgres_url, schema=self.schema_name)
