"""Each batch partition with its newest run; the batches that failed for good with their error and objects."""

from __future__ import annotations

from typing import Any

from pipeline_project.settings import Settings


def batch_rows(settings: Settings, instance: Any, *, failed_only: bool = False, limit: int = 500) -> list:
    """`defs.instance.batch_outcomes` of `instance`, the objects read from each failed batch's manifest."""
    from pipeline_project.defs.instance import batch_outcomes
    from pipeline_project.ingest.manifest import read_manifest

    s3 = settings.s3_client()
    return batch_outcomes(
        instance, lambda b: read_manifest(s3, settings.bucket, b), failed_only=failed_only, limit=limit
    )
