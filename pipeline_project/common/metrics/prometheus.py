"""Prometheus metrics of the producer, the loader, the trainer and the cleaner (plain Python, no Dagster).

Two ways out, one set of names (every one prefixed `pipeline_`):

- long-lived processes (the trainer, one per rank) serve `/metrics` with `serve_metrics(port, local_rank)`
  (port `base + local_rank`; 0 or None: off) and record into `METRICS`, the process's default set;
- short-lived ones (a Dagster step cleaning or producing one batch) record into a fresh `PipelineMetrics()` and
  `push_job_totals()` it to a Pushgateway, since nothing could scrape them before they exit: one group per job
  (never per batch, so the series do not grow with history), whose counters are the job's totals over every
  batch, kept in PostgreSQL by `metric_totals.MetricTotals`, and whose gauges are the last batch's.

The loader commits no offsets (`assign()`, offsets in the checkpoint), so lag exporters that read consumer groups
see nothing: `record_loader` exports the lag per partition itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    push_to_gateway,
    pushadd_to_gateway,
    start_http_server,
)
from prometheus_client.metrics_core import Metric

from pipeline_project.common.metrics.totals import MetricTotals, MetricTotalsUnavailableError, Series

log = logging.getLogger(__name__)

STEP_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


# Every metric: (attribute of PipelineMetrics, type, name, help, labels)
METRIC_TABLE = (
    # producer (one batch per ProduceReport)
    ("produce_messages", Counter, "pipeline_produce_messages", "Kafka messages produced", ("topic",)),
    ("produce_bytes", Counter, "pipeline_produce_bytes", "Token bytes produced", ("topic",)),
    ("produce_blocks", Counter, "pipeline_produce_blocks", "Token blocks produced", ("topic",)),
    ("produce_tokens", Counter, "pipeline_produce_tokens", "Real tokens produced", ("topic",)),
    ("produce_messages_per_s", Gauge, "pipeline_produce_messages_per_second",
     "Messages per second of the last produce call", ("topic",)),
    ("produce_bytes_per_s", Gauge, "pipeline_produce_bytes_per_second", "Bytes per second of the last produce call",
     ("topic",)),
    ("broker_rtt", Gauge, "pipeline_kafka_broker_rtt_seconds", "Broker round-trip time (librdkafka statistics)",
     ("client", "stat")),
    # loader (per rank and partition)
    ("consumer_lag", Gauge, "pipeline_loader_consumer_lag_messages",
     "Log end offset minus the loader's delivered position", ("topic", "partition", "rank")),
    ("loader_data_wait", Gauge, "pipeline_loader_data_wait_fraction",
     "Share of wall time the loader's consumer waited for data", ("rank",)),
    ("loader_tokens", Counter, "pipeline_loader_tokens", "Real tokens delivered", ("rank",)),
    ("loader_dead_letters", Gauge, "pipeline_loader_dead_letters", "Malformed messages skipped", ("rank",)),
    # trainer (per rank)
    ("train_tokens", Counter, "pipeline_train_tokens", "Tokens trained on, all ranks", ("rank",)),
    ("train_tokens_per_s", Gauge, "pipeline_train_tokens_per_second", "Training throughput", ("rank",)),
    ("train_data_wait", Gauge, "pipeline_train_data_wait_fraction", "Share of the step spent waiting for the batch",
     ("rank",)),
    ("train_loss", Gauge, "pipeline_train_loss", "Training loss (mean over ranks)", ("rank",)),
    ("train_step", Gauge, "pipeline_train_step", "Global step just completed", ("rank",)),
    ("train_step_seconds", Histogram, "pipeline_train_step_seconds", "Wall time of a step", ("rank",)),
    ("expert_imbalance", Gauge, "pipeline_train_expert_load_imbalance",
     "max_i load_i / mean_load - 1 (0: balanced); router 'all': worst", ("rank", "router")),
    # cleaning (one batch per call)
    ("documents", Counter, "pipeline_cleaning_documents", "Documents by outcome (in, kept, dropped, quarantined)",
     ("outcome",)),
    ("dropped", Counter, "pipeline_cleaning_dropped", "Documents dropped, by reason", ("reason",)),
    # any pushed step
    ("batch_last_success", Gauge, "pipeline_batch_last_success_timestamp_seconds",
     "When a step last pushed a finished batch (Unix time)", ("asset",)),
)  # fmt: skip


class PipelineMetrics:
    """Every metric of the pipeline, registered in one `CollectorRegistry` (what is served or pushed)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._delivered_seen: dict[str, int] = {}
        for attribute, kind, name, description, labels in METRIC_TABLE:
            extra = {"buckets": STEP_SECONDS_BUCKETS} if kind is Histogram else {}
            setattr(self, attribute, kind(name, description, labels, registry=self.registry, **extra))

    def names(self) -> set[str]:
        """The name of every series this set can export: counters' `_total`, histograms' `_bucket`, ..."""
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
        return {
            family.name + suffix for family in self.registry.collect() for suffix in suffixes.get(family.type, ("",))
        }

    # -- recorders ---------------------------------------------------------------------------------------------
    def record_produce(self, report: Any) -> None:
        """From a `streaming.ledger.ProduceReport`; a reused (already produced) batch adds nothing."""
        if getattr(report, "reused", False):
            return
        topic = report.topic
        self.produce_messages.labels(topic).inc(report.messages)
        self.produce_bytes.labels(topic).inc(report.bytes)
        self.produce_blocks.labels(topic).inc(report.blocks)
        self.produce_tokens.labels(topic).inc(report.tokens)
        stats = report.kafka_stats or {}
        seconds = float(report.seconds or 0.0)
        msgs_per_s = float(stats.get("tx_msgs_per_s") or 0.0) or (report.messages / seconds if seconds else 0.0)
        self.produce_messages_per_s.labels(topic).set(msgs_per_s)
        self.produce_bytes_per_s.labels(topic).set(report.bytes / seconds if seconds else 0.0)
        if stats.get("broker_rtt_avg_ms") is not None:
            self.broker_rtt.labels("producer", "avg").set(float(stats["broker_rtt_avg_ms"]) / 1000)
        if stats.get("broker_rtt_p99_ms") is not None:
            self.broker_rtt.labels("producer", "p99").set(float(stats["broker_rtt_p99_ms"]) / 1000)

    def record_loader(self, loader_metrics: Mapping[str, Any], *, topic: str, rank: int = 0) -> None:
        """From `KafkaBlockLoader.metrics()`: lag per partition, data wait, tokens delivered (cumulative there)."""
        r = str(rank)
        for partition, lag in (loader_metrics.get("lag") or {}).items():
            self.consumer_lag.labels(topic, str(partition), r).set(float(lag))
        if "data_wait_fraction" in loader_metrics:
            self.loader_data_wait.labels(r).set(float(loader_metrics["data_wait_fraction"]))
        delivered = int(loader_metrics.get("tokens_delivered", 0) or 0)  # cumulative in the loader
        self.loader_tokens.labels(r).inc(max(0, delivered - self._delivered_seen.get(r, 0)))
        self._delivered_seen[r] = max(delivered, self._delivered_seen.get(r, 0))
        self.loader_dead_letters.labels(r).set(float(loader_metrics.get("dead_letters", 0) or 0))

    def record_train_step(self, step: Any, *, rank: int = 0) -> None:
        """From a `training.trainer.StepMetrics` (only steps that log: `log_every`)."""
        r = str(rank)
        self.train_tokens.labels(r).inc(step.tokens)
        self.train_tokens_per_s.labels(r).set(step.tokens_per_s)
        self.train_data_wait.labels(r).set(step.data_wait_fraction)
        self.train_loss.labels(r).set(step.loss)
        self.train_step.labels(r).set(step.step)
        self.train_step_seconds.labels(r).observe(step.step_time_s)
        load = step.expert_load
        self.expert_imbalance.labels(r, "all").set(load.max_violation)
        for router, loads in load.counts.items():
            mean = sum(loads) / len(loads) if loads else 0
            self.expert_imbalance.labels(r, router).set(max(loads) / mean - 1.0 if mean > 0 else 0.0)

    def record_cleaning(self, counts: Mapping[str, int], dropped_by_reason: Mapping[str, int]) -> None:
        """From a cleaning run's counts (in, kept, dropped, quarantined) and its drops per reason."""
        for outcome in ("in", "kept", "dropped", "quarantined"):
            self.documents.labels(outcome).inc(int(counts.get(outcome, 0) or 0))
        for reason, n in dropped_by_reason.items():
            self.dropped.labels(str(reason)).inc(int(n))

    def counter_samples(self) -> dict[Series, float]:
        """Every counter sample recorded here (`..._total`, labels sorted)."""
        return {
            (s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in self.registry.collect()
            if family.type == "counter"
            for s in family.samples
            if s.name.endswith("_total")
        }


class _Snapshot:
    """A collector that yields metric families built elsewhere (what one push sends)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _snapshot(metrics: PipelineMetrics, totals: Mapping[Series, float] | None) -> CollectorRegistry:
    """`metrics`' gauges, and `totals` as the counters (none when None)."""
    collected = list(metrics.registry.collect())
    families = [f for f in collected if f.type == "gauge" and f.samples]
    if totals:
        docs = {f.name: f.documentation for f in collected if f.type == "counter"}
        counters: dict[str, Metric] = {}
        for (name, labels), value in sorted(totals.items()):
            base = name.removesuffix("_total")
            family = counters.setdefault(base, Metric(base, docs.get(base, base), "counter"))
            family.add_sample(name, dict(labels), value)
        families += counters.values()
    registry = CollectorRegistry()
    registry.register(_Snapshot(families))
    return registry


def push_job_totals(
    metrics: PipelineMetrics,
    *,
    gateway: str | None,
    job: str,
    batch: str,
    asset: str,
    totals_url: str,
    timeout: float = 5.0,
) -> bool:
    """Add `batch`'s counters to `job`'s totals and push the totals and `metrics`' gauges as group `job`.

    Idempotent per batch: a retried step pushes the same totals again. Best effort: a Pushgateway or database
    that does not answer is a warning, never an error. Without the database the batch's gauges are pushed
    and the job's counters stay as last pushed.
    """
    if not gateway:
        return False
    metrics.batch_last_success.labels(asset).set(time.time())
    try:
        with MetricTotals(totals_url) as store:
            store.add(job, batch, metrics.counter_samples())
            with store.locked(job) as totals:  # pushed under the job's lock: no older total lands after a newer one
                return _push(push_to_gateway, gateway, job, _snapshot(metrics, totals), timeout)
    except MetricTotalsUnavailableError as exc:
        log.warning("metrics: %s; pushing batch %s's gauges only, %s's counters stay as last pushed", exc, batch, job)
        return _push(pushadd_to_gateway, gateway, job, _snapshot(metrics, None), timeout)


def _push(how, gateway: str, job: str, registry: CollectorRegistry, timeout: float) -> bool:
    try:
        how(gateway, job=job, registry=registry, timeout=timeout)
        return True
    except Exception as exc:  # noqa: BLE001 - metrics must never fail the work they describe
        log.warning("could not push metrics to %s (%s: %s)", gateway, type(exc).__name__, exc)
        return False


METRICS = PipelineMetrics()
"""This process's metrics: what `serve_metrics` exposes."""


def serve_metrics(port: int | None, local_rank: int = 0, metrics: PipelineMetrics = METRICS) -> int | None:
    """Serve `/metrics` on `port + local_rank` (every rank of a node its own port); 0 or None: off.

    Returns the port served, or None. A port already taken is a warning: metrics never stop training.
    """
    if not port:
        return None
    actual = int(port) + int(local_rank)
    try:
        start_http_server(actual, registry=metrics.registry)
    except OSError as exc:
        log.warning("metrics: cannot serve /metrics on port %d (%s)", actual, exc)
        return None
    log.info("metrics: serving /metrics on port %d", actual)
    return actual


def record_produce(report: Any, metrics: PipelineMetrics = METRICS) -> None:
    metrics.record_produce(report)


def record_loader(loader_metrics: Mapping[str, Any], *, topic: str, rank: int = 0, metrics=METRICS) -> None:
    metrics.record_loader(loader_metrics, topic=topic, rank=rank)


def record_train_step(step: Any, *, rank: int = 0, metrics: PipelineMetrics = METRICS) -> None:
    metrics.record_train_step(step, rank=rank)


def record_cleaning(counts: Mapping[str, int], dropped_by_reason: Mapping[str, int], metrics=METRICS) -> None:
    metrics.record_cleaning(counts, dropped_by_reason)
