"""Running totals of the short-lived steps' counters, kept in PostgreSQL (plain Python, no Dagster).

A Dagster step cleans or produces one batch and exits; Prometheus can only see what it pushed to the
Pushgateway. Pushing one group per batch makes the series grow with history (and `sum()` over them grows
with it too). Instead each job keeps one group, and its counters are job-wide totals kept here:

- `add(job, key, counters)` records one batch's counters under `key` (the batch). A retried or re-run step
  records the same key again: only growth beyond what that key already gave is added, so totals neither
  double count nor go down (a Prometheus counter that goes down reads as a reset);
- `locked(job)` holds the job's lock while the caller pushes the totals it yields, so two steps pushing at
  once cannot leave an older total on the gateway after a newer one.

Per push: one row per series of the batch, then one read of the job's totals (bounded by the number of
series, not of batches).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pipeline_project.common.postgres import SchemaConnection

Series = tuple[str, tuple[tuple[str, str], ...]]
"""A sample's name and its sorted labels: ("pipeline_cleaning_documents_total", (("outcome", "kept"),))."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_counters (
    job text NOT NULL,
    batch_key text NOT NULL,
    series text NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (job, batch_key, series)
);
CREATE TABLE IF NOT EXISTS job_totals (
    job text NOT NULL,
    series text NOT NULL,
    value double precision NOT NULL,
    PRIMARY KEY (job, series)
);
"""


class MetricTotalsUnavailableError(RuntimeError):
    """The database that keeps the totals did not answer or failed."""


def series_key(series: Series) -> str:
    name, labels = series
    return json.dumps([name, [list(kv) for kv in sorted(labels)]], separators=(",", ":"))


def parse_series(text: str) -> Series:
    name, labels = json.loads(text)
    return name, tuple((str(k), str(v)) for k, v in labels)


class MetricTotals:
    """Counter totals per job in schema `schema` of the PostgreSQL server at `url`."""

    def __init__(self, url: str, schema: str = "pipeline_metrics", connect_timeout_s: int = 5):
        self._db = SchemaConnection(
            url,
            schema,
            _SCHEMA,
            what="metric totals",
            error=MetricTotalsUnavailableError,
            connect_timeout_s=connect_timeout_s,
        )

    def __enter__(self) -> MetricTotals:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _transaction(self, job: str):
        """One transaction holding `job`'s lock (released at commit or rollback)."""
        return self._db.transaction(lock=f"metric_totals:{job}")

    def add(self, job: str, key: str, counters: Mapping[Series, float]) -> dict[Series, float]:
        """Record `key`'s counters; returns what was added to the totals (growth beyond `key`'s earlier record)."""
        wanted = {series_key(s): float(v) for s, v in counters.items()}
        added: dict[Series, float] = {}
        with self._transaction(job) as cur:
            cur.execute(
                "SELECT series, value FROM batch_counters WHERE job = %s AND batch_key = %s AND series = ANY(%s)",
                (job, key, list(wanted)),
            )
            before = dict(cur.fetchall())
            for series, value in sorted(wanted.items()):
                grow = value - before.get(series, 0.0)
                if grow <= 0:
                    continue
                cur.execute(
                    "INSERT INTO batch_counters (job, batch_key, series, value) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (job, batch_key, series) DO UPDATE SET value = EXCLUDED.value",
                    (job, key, series, value),
                )
                cur.execute(
                    "INSERT INTO job_totals (job, series, value) VALUES (%s, %s, %s) "
                    "ON CONFLICT (job, series) DO UPDATE SET value = job_totals.value + EXCLUDED.value",
                    (job, series, grow),
                )
                added[parse_series(series)] = grow
        return added

    def totals(self, job: str) -> dict[Series, float]:
        with self.locked(job) as current:
            return current

    @contextmanager
    def locked(self, job: str) -> Iterator[dict[Series, float]]:
        """`job`'s totals, with its lock held until the block ends (push them inside it)."""
        with self._transaction(job) as cur:
            cur.execute("SELECT series, value FROM job_totals WHERE job = %s", (job,))
            yield {parse_series(s): float(v) for s, v in cur.fetchall()}

    def close(self) -> None:
        self._db.close()
