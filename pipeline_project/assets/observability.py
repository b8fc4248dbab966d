"""Batch metrics of the ingest steps, pushed to the Pushgateway (a Dagster step ends before any scrape)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline_project.metrics import PipelineMetrics, push_job_totals
from pipeline_project.settings import Settings


def push_batch_metrics(job: str, asset: str, batch_id: str, record: Callable[[PipelineMetrics], None]) -> bool:
    """Record this batch into a fresh metric set, add its counters to `job`'s totals and push those.

    Best effort: a Pushgateway or database that does not answer is a warning in the log, never a failed step.
    """
    settings = Settings()
    metrics = PipelineMetrics()
    record(metrics)
    return push_job_totals(
        metrics, gateway=settings.pushgateway_url, job=job, batch=batch_id, asset=asset,
        totals_url=settings.postgres_url,
    )  # fmt: skip
