"""Prometheus in the local stack scrapes what the pipeline exports: an ingest materialization's pushed batch
metrics (cleaning, producing) and a trainer rank's /metrics, and the dashboard's queries name only series it saw."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import dagster as dg
import pytest

from pipeline_project_tests.observability import dashboard

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def prometheus(local_stack):
    """The stack's Prometheus + Pushgateway (started for this module when not running, stopped after)."""
    started = local_stack.up(["prometheus"], timeout=120)
    yield local_stack.config
    if started:
        local_stack.stop(started)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(cfg, promql: str) -> list[dict]:
    url = f"http://{cfg.host}:{cfg.prometheus_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def _wait_for(cfg, promql: str, ok, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        result = _query(cfg, promql)
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{promql}: {result}")
        time.sleep(0.5)


def _value(result: list[dict]) -> float:
    return sum(float(r["value"][1]) for r in result)


def _materialize_ingest(instance, resources, layout, s3) -> str:
    from pipeline_project.definitions import defs
    from pipeline_project.defs.assets import cleaned, raw, token_blocks
    from pipeline_project.defs.partitions import batches
    from pipeline_project.defs.sensors.raw_s3 import raw_s3_sensor
    from pipeline_project.demo.sample.corpus import generate

    for f in generate(seed=3, docs_per_language=3):
        s3.put_object(Bucket=layout.bucket, Key=layout.raw_prefix + f.key.removeprefix("raw/sample/"), Body=f.data)
    sensor_resources = {k: resources[k] for k in ("s3", "layout")}
    with dg.build_sensor_context(instance=instance, resources=sensor_resources, definitions=defs) as ctx:
        batch = raw_s3_sensor(ctx).run_requests[0].partition_key
    instance.add_dynamic_partitions(batches.name, [batch])
    assets = [raw.raw_text, cleaned.cleaned_shards, token_blocks.token_blocks]
    result = dg.materialize(assets, resources=resources, partition_key=batch, instance=instance)
    assert result.success
    cleaned_md = result.asset_materializations_for_node("cleaned_shards")[0].metadata
    produced_md = result.asset_materializations_for_node("token_blocks")[0].metadata
    return batch, result.run_id, cleaned_md["kept"].value, produced_md["messages"].value


def _assert_ingest_run_tagged(tracking_uri: str, batch: str, run_id: str) -> None:
    """The produce step's MLflow run carries the shared tag vocabulary (pipeline_project/common/run_tags.py)."""
    from mlflow.tracking import MlflowClient

    from pipeline_project.common.run_tags import TAG_KEYS

    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(experiments, filter_string=f"tags.dagster_run_id = '{run_id}'")
    tags = run.data.tags
    assert set(TAG_KEYS) <= set(tags), tags
    assert tags["partition"] == batch and tags["asset"] == "token_blocks" and len(tags["config_hash"]) == 16


def test_prometheus_sees_ingest_and_trainer_series_move(prometheus, instance, resources, layout, s3, uid):
    cfg = prometheus
    from pipeline_project.defs.resources.pushgateway import PushgatewayResource

    gateway = f"http://{cfg.host}:{cfg.pushgateway_port}"
    resources = {
        **resources,
        "pushgateway": PushgatewayResource(url=gateway, totals_url=resources["pushgateway"].totals_url),
    }
    port = _free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "pipeline_project_tests.observability.serve_worker", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    targets = cfg.state_dir / "prometheus" / "targets" / f"test-{uid}.json"
    try:
        assert worker.stdout.readline().strip() == "serving"
        targets.write_text(json.dumps([{"targets": [f"{cfg.host}:{port}"], "labels": {"test": uid}}]))
        kept_sel = 'pipeline_cleaning_documents_total{outcome="kept"}'
        _wait_for(cfg, 'up{job="pushgateway"}', lambda r: _value(r) == 1)  # scraped once: `before` is current
        kept_before = _value(_query(cfg, kept_sel))
        batch, run_id, kept_in, messages = _materialize_ingest(instance, resources, layout, s3)
        _assert_ingest_run_tagged(resources["mlflow"].tracking_uri, batch, run_id)

        # the ingest steps' pushes: one group per job, whose counters are totals over every batch (this one's
        # counts included) and whose gauges are the last batch's; no series carries a batch label
        kept = _wait_for(cfg, kept_sel, lambda r: _value(r) >= kept_before + kept_in > kept_before)
        assert kept[0]["metric"]["job"] == "pipeline_cleaning"
        assert _wait_for(cfg, "pipeline_cleaning_dropped_total", bool)
        # this test's topic is its own: the job's total for it is this batch's count, exactly
        produced_sel = f'pipeline_produce_messages_total{{topic="{layout.topic.name}"}}'
        produced = _wait_for(cfg, produced_sel, bool)
        assert _value(produced) == messages > 0
        assert produced[0]["metric"]["job"] == "pipeline_produce"
        assert _value(_wait_for(cfg, f'pipeline_produce_bytes_total{{topic="{layout.topic.name}"}}', bool)) > 0
        assert _wait_for(cfg, 'pipeline_kafka_broker_rtt_seconds{stat="avg"}', bool)
        stamps = _wait_for(cfg, "pipeline_batch_last_success_timestamp_seconds", lambda r: len(r) >= 2)
        assert {r["metric"]["asset"] for r in stamps} >= {"cleaned_shards", "token_blocks"}
        assert not _query(cfg, '{__name__=~"pipeline_(cleaning|produce|batch)_.+", batch!=""}')

        # the trainer rank's /metrics, scraped every 2 s: its token counter moves between two scrapes
        tokens = f'pipeline_train_tokens_total{{test="{uid}",rank="0"}}'
        first = _value(_wait_for(cfg, tokens, lambda r: _value(r) > 0))
        _wait_for(cfg, tokens, lambda r: _value(r) > first)
        assert _value(_wait_for(cfg, f'rate(pipeline_train_tokens_total{{test="{uid}"}}[10s])', bool)) > 0
        lag = _wait_for(cfg, f'pipeline_loader_consumer_lag_messages{{test="{uid}"}}', lambda r: len(r) == 2)
        assert {r["metric"]["partition"] for r in lag} == {"0", "1"}

        # the alerting rules are loaded and evaluated (none fires on this run's healthy series)
        url = f"http://{cfg.host}:{cfg.prometheus_port}/api/v1/rules"
        with urllib.request.urlopen(url, timeout=5) as resp:
            groups = json.load(resp)["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        assert {"PipelineGpuWaitingForData", "PipelineQuarantineShareHigh", "PipelineIngestSilent"} <= set(rules)
        assert all(r["health"] == "ok" for r in rules.values()), rules
        assert rules["PipelineIngestSilent"]["state"] == "inactive"

        # every series the dashboard queries is among those Prometheus holds now
        seen = {r["metric"]["__name__"] for r in _query(cfg, '{__name__=~"pipeline_.+"}')}
        missing = dashboard.all_series(dashboard.load()) - seen
        assert not missing, f"the dashboard queries series Prometheus never saw: {sorted(missing)}"
        for expr in dashboard.queries(dashboard.load()):
            _query(cfg, expr)  # each query parses and evaluates
    finally:
        targets.unlink(missing_ok=True)
        worker.kill()
        worker.wait()
