"""The cross-batch dedup index as a Dagster resource: a PostgreSQL database (`cleaning.dedup_store`)."""

from __future__ import annotations

import dagster as dg


class DedupIndexResource(dg.ConfigurableResource):
    """`postgres_url` is a libpq URL; keep the password out of it in deployments (PGPASSWORD in the environment)."""

    postgres_url: str
    schema_name: str = "dedup"
    """The PostgreSQL schema that holds this deployment's index (one database can serve several)."""

    wait_s: float = 600.0
    """How long a batch waits for a concurrent batch that holds the same new documents to publish or die."""

    def open(self, num_perm: int, num_bands: int, is_published=None):
        """`is_published(batch_id, attempt)`: whether the batch's manifest names the attempt (resolves dead ones)."""
        from pipeline_project.cleaning.dedup.postgres import PostgresDedupIndex

        return PostgresDedupIndex(
            self.postgres_url,
            num_perm=num_perm,
            num_bands=num_bands,
            schema=self.schema_name,
            is_published=is_published,
            wait_s=self.wait_s,
        )
