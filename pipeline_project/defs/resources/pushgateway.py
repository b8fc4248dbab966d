"""The Pushgateway the ingest steps push their batch metrics to (a Dagster step ends before any scrape)."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from pipeline_project.common.metrics.prometheus import PipelineMetrics, push_job_totals


class PushgatewayResource(dg.ConfigurableResource):
    url: str = ""
    """The Pushgateway's URL ($PIPELINE_PUSHGATEWAY_URL); empty: push nothing."""
    totals_url: str = ""
    """The PostgreSQL database that keeps each job's counter totals (`metric_totals`)."""

    def push_batch(self, job: str, asset: str, batch_id: str, record: Callable[[PipelineMetrics], None]) -> bool:
        """Record this batch into a fresh metric set, add its counters to `job`'s totals and push those.

        Best effort: a Pushgateway or database that does not answer is a warning in the log, never a failed step.
        """
        metrics = PipelineMetrics()
        record(metrics)
        return push_job_totals(
            metrics, gateway=self.url, job=job, batch=batch_id, asset=asset, totals_url=self.totals_url
        )
