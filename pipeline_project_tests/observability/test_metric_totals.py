"""Job-wide counter totals in the stack's PostgreSQL: a batch recorded again adds only its growth, concurrent
batches add up exactly, a push holds the job's lock, and without the database only the gauges are pushed."""

from __future__ import annotations

import logging
import socket
import threading

import pytest
from prometheus_client import generate_latest

from pipeline_project.common.metrics import prometheus as metrics_module
from pipeline_project.common.metrics.prometheus import PipelineMetrics, push_job_totals
from pipeline_project.common.metrics.totals import MetricTotals, MetricTotalsUnavailableError

KEPT = ("pipeline_cleaning_documents_total", (("outcome", "kept"),))
DROPPED = ("pipeline_cleaning_documents_total", (("outcome", "dropped"),))


def _cleaned(kept: int, dropped: int) -> PipelineMetrics:
    m = PipelineMetrics()
    m.record_cleaning({"in": kept + dropped, "kept": kept, "dropped": dropped}, {"too_short": dropped})
    return m


def test_counter_samples_and_snapshot_export_totals_and_gauges():
    m = _cleaned(6, 3)
    samples = m.counter_samples()
    assert samples[KEPT] == 6 and samples[DROPPED] == 3
    assert samples[("pipeline_cleaning_dropped_total", (("reason", "too_short"),))] == 3
    m.batch_last_success.labels("cleaned_shards").set(123.0)

    text = generate_latest(metrics_module._snapshot(m, {KEPT: 600.0, DROPPED: 30.0})).decode()
    assert 'pipeline_cleaning_documents_total{outcome="kept"} 600.0' in text
    assert "# TYPE pipeline_cleaning_documents_total counter" in text
    assert "# HELP pipeline_cleaning_documents_total Documents by outcome" in text
    assert 'pipeline_batch_last_success_timestamp_seconds{asset="cleaned_shards"} 123.0' in text
    gauges_only = generate_latest(metrics_module._snapshot(m, None)).decode()
    assert "pipeline_cleaning_documents_total" not in gauges_only and "last_success" in gauges_only


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_down_pushes_gauges_only_and_warns(monkeypatch, caplog):
    pushed = []
    monkeypatch.setattr(metrics_module, "push_to_gateway", lambda *a, **k: pushed.append(("put", k["registry"])))
    monkeypatch.setattr(metrics_module, "pushadd_to_gateway", lambda *a, **k: pushed.append(("post", k["registry"])))
    url = f"postgresql://nobody@127.0.0.1:{_closed_port()}/none"
    with caplog.at_level(logging.WARNING, logger="pipeline_project.common.metrics.prometheus"):
        ok = push_job_totals(
            _cleaned(2, 1), gateway="http://gw:9091", job="j", batch="b1", asset="cleaned_shards", totals_url=url
        )
    assert ok
    ((how, registry),) = pushed
    text = generate_latest(registry).decode()
    assert how == "post" and "pipeline_cleaning_documents_total" not in text and "last_success" in text
    assert "metric totals database unreachable" in caplog.text and "j's counters stay as last pushed" in caplog.text
    with pytest.raises(MetricTotalsUnavailableError, match="unreachable"):
        MetricTotals(url, connect_timeout_s=1).add("j", "b1", {KEPT: 1})


def test_no_gateway_pushes_nothing():
    assert push_job_totals(_cleaned(1, 0), gateway=None, job="j", batch="b", asset="a", totals_url="") is False


@pytest.mark.stack
def test_a_batch_recorded_again_adds_only_its_growth(pg_url):
    with MetricTotals(pg_url) as store:
        assert store.add("clean", "b1", {KEPT: 5, DROPPED: 2}) == {KEPT: 5, DROPPED: 2}
        assert store.add("clean", "b1", {KEPT: 5, DROPPED: 2}) == {}  # a retry of the same batch
        assert store.add("clean", "b1", {KEPT: 4, DROPPED: 3}) == {DROPPED: 1}  # never down, only growth
        store.add("clean", "b2", {KEPT: 10})
        store.add("produce", "b1", {KEPT: 100})  # another job's totals are its own
        assert store.totals("clean") == {KEPT: 15, DROPPED: 3}
    with MetricTotals(pg_url) as reopened:  # kept in the database, not the process
        assert reopened.totals("clean") == {KEPT: 15, DROPPED: 3}


@pytest.mark.stack
def test_concurrent_batches_add_up_exactly(pg_url):
    errors = []

    def worker(w: int) -> None:
        try:
            with MetricTotals(pg_url) as store:
                for i in range(15):
                    store.add("clean", f"b{i % 10}-{w % 3}", {KEPT: 1 + i % 10, DROPPED: 1})  # overlapping keys
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # 3 key groups x 10 batches, each counted once whatever the number of writers
    with MetricTotals(pg_url) as store:
        assert store.totals("clean") == {KEPT: 3 * sum(1 + i for i in range(10)), DROPPED: 30}


@pytest.mark.stack
def test_a_push_holds_the_jobs_lock(pg_url):
    with MetricTotals(pg_url) as store, MetricTotals(pg_url) as other:
        store.add("clean", "b1", {KEPT: 1})
        done = threading.Event()
        adder = threading.Thread(target=lambda: (other.add("clean", "b2", {KEPT: 2}), done.set()))
        with store.locked("clean") as totals:
            adder.start()
            assert not done.wait(1.0), "a batch was added while a push held the job's totals"
            assert totals == {KEPT: 1}
        assert done.wait(10)
        adder.join()
        assert store.totals("clean") == {KEPT: 3}


@pytest.mark.stack
def test_a_pushgateway_that_does_not_answer_is_a_warning_and_the_totals_still_count(pg_url, caplog):
    gateway = f"http://127.0.0.1:{_closed_port()}"
    with caplog.at_level(logging.WARNING, logger="pipeline_project.common.metrics.prometheus"):
        ok = push_job_totals(_cleaned(4, 1), gateway=gateway, job="j", batch="b1", asset="a", totals_url=pg_url)
    assert ok is False
    assert f"could not push metrics to {gateway}" in caplog.text
    with MetricTotals(pg_url) as store:  # the next push that gets through carries this batch too
        assert store.totals("j")[KEPT] == 4
