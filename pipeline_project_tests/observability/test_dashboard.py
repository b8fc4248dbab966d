"""deploy/grafana/pipeline.json: a well-formed dashboard whose queries name only series metrics.py declares.

(Grafana cannot be installed here; test_prometheus.py checks the same queries against what Prometheus scraped.)
"""

from __future__ import annotations

from pipeline_project.common.metrics.prometheus import PipelineMetrics
from pipeline_project_tests.observability import dashboard


def test_dashboard_is_well_formed():
    d = dashboard.load()
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] in {"timeseries", "stat", "bargauge", "gauge", "table"}, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert dashboard.series_named(t["expr"]), f"{p['title']}: {t['expr']} names no pipeline_ series"


def test_every_query_names_a_declared_series_and_every_component_has_a_panel():
    declared = PipelineMetrics().names()
    used = dashboard.all_series(dashboard.load())
    assert used <= declared, f"undeclared: {sorted(used - declared)}"
    for prefix in ("pipeline_produce_", "pipeline_kafka_", "pipeline_loader_", "pipeline_train_", "pipeline_cleaning_"):
        assert any(n.startswith(prefix) for n in used), prefix


def test_metrics_record_what_the_components_report():
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    m = PipelineMetrics()
    report = SimpleNamespace(
        reused=False, topic="t", messages=10, bytes=4000, blocks=20, tokens=1200, seconds=2.0,
        kafka_stats={"tx_msgs_per_s": 5.0, "broker_rtt_avg_ms": 3.0, "broker_rtt_p99_ms": 9.0},
    )  # fmt: skip
    m.record_produce(report)
    m.record_produce(SimpleNamespace(reused=True))  # an already-produced batch adds nothing
    m.record_cleaning({"in": 10, "kept": 6, "dropped": 3, "quarantined": 1}, {"exact_dup": 2, "too_short": 1})
    m.record_loader({"lag": {0: 5, 3: 1}, "data_wait_fraction": 0.25, "tokens_delivered": 100}, topic="t", rank=1)
    m.record_loader({"lag": {0: 2, 3: 0}, "data_wait_fraction": 0.5, "tokens_delivered": 160}, topic="t", rank=1)
    value = m.registry.get_sample_value
    assert value("pipeline_produce_messages_total", {"topic": "t"}) == 10
    assert value("pipeline_produce_bytes_per_second", {"topic": "t"}) == 2000
    assert value("pipeline_kafka_broker_rtt_seconds", {"client": "producer", "stat": "p99"}) == 0.009
    assert value("pipeline_cleaning_dropped_total", {"reason": "exact_dup"}) == 2
    assert value("pipeline_cleaning_documents_total", {"outcome": "kept"}) == 6
    assert value("pipeline_loader_consumer_lag_messages", {"topic": "t", "partition": "0", "rank": "1"}) == 2
    assert value("pipeline_loader_tokens_total", {"rank": "1"}) == 160  # cumulative in the loader, not summed
    assert b"pipeline_loader_data_wait_fraction" in generate_latest(m.registry)


def test_serve_metrics_is_off_without_a_port():
    from pipeline_project.common.metrics.prometheus import serve_metrics

    assert serve_metrics(0) is None and serve_metrics(None) is None
