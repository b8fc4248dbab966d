"""The cross-batch dedup index as a Dagster resource: a PostgreSQL database (`cleaning.dedup_store`)."""

from __future__ import annotations

import dagster as dg


class DedupIndexResource(dg.ConfigurableResource):
    """`postgres_url` is a libpq URL; keep the password out of it in deployments (PGPASSWORD in the environment)."""

    postgres_url: str
    schema_name: str = "dedup"
    """The PostgreSQL schema that holds this deployment's index (one database can serve several)."""

    def open(self, num_perm: int, num_bands: int):
        from pipeline_project.cleaning.dedup_store import PostgresDedupIndex

        return PostgresDedupIndex(self.postgres_url, num_perm=num_perm, num_bands=num_bands, schema=self.schema_name)
