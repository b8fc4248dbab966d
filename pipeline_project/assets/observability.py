"""Batch metrics of the ingest steps, pushed to the Pushgateway (a Dagster step ends before any scrape)."""

from __future__ import annotations

from collections.abc import Callable

from pipeline_project.metrics import PipelineMetrics
from pipeline_project.settings import Settings


def push_batch_metrics(job: str, batch_id: str, record: Callable[[PipelineMetrics], None]) -> bool:
    """Record into a fresh metric set and push it as `job`/`batch` (replacing an earlier attempt's push).

    Best effort: a Pushgateway that does not answer is a warning in the log, never a failed step.
    """
    metrics = PipelineMetrics()
    record(metrics)
    return metrics.push(Settings().pushgateway_url, job=job, grouping_key={"batch": batch_id})
