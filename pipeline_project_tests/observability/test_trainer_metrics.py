"""The trainer's wiring into metrics.py: every rank's loader figures (labelled by its rank) on the way to the lag,
rank 0's step metrics, and a /metrics port per local rank."""

from __future__ import annotations

import socket
import urllib.request
from types import SimpleNamespace

from pipeline_project.common.metrics.prometheus import METRICS, PipelineMetrics, serve_metrics


def test_each_rank_exports_its_loader_lag_per_partition():
    from pipeline_project.training import run

    inv = SimpleNamespace(job=SimpleNamespace(topic=SimpleNamespace(name="wired")), dist=SimpleNamespace(rank=3))
    figures = {"lag": {0: 5, 2: 1}, "lag_total": 6, "data_wait_fraction": 0.25, "tokens_delivered": 640}
    assert run._loader_lag(inv, SimpleNamespace(metrics=lambda: figures)) == 6
    value = METRICS.registry.get_sample_value
    assert value("pipeline_loader_consumer_lag_messages", {"topic": "wired", "partition": "2", "rank": "3"}) == 1
    assert value("pipeline_loader_data_wait_fraction", {"rank": "3"}) == 0.25


def test_step_metrics_are_labelled_by_rank():
    from pipeline_project.training.balancing import ExpertLoad
    from pipeline_project.training.trainer import StepMetrics

    m = PipelineMetrics()
    step = StepMetrics(step=7, loss=2.5, lr=1e-3, grad_norm=1.0, tokens=512, tokens_seen=3584, tokens_per_s=900.0,
                       step_time_s=0.5, data_wait_s=0.1, data_wait_fraction=0.2, consumer_lag=None,
                       expert_load=ExpertLoad(counts={"layer1": [1, 3], "layer2": [2, 2]}))  # fmt: skip
    m.record_train_step(step, rank=0)
    m.record_train_step(step, rank=0)
    value = m.registry.get_sample_value
    assert value("pipeline_train_tokens_total", {"rank": "0"}) == 1024
    assert value("pipeline_train_loss", {"rank": "0"}) == 2.5
    assert value("pipeline_train_expert_load_imbalance", {"rank": "0", "router": "layer1"}) == 0.5
    assert value("pipeline_train_expert_load_imbalance", {"rank": "0", "router": "all"}) == 0.5
    assert value("pipeline_train_step_seconds_count", {"rank": "0"}) == 2


def test_each_local_rank_serves_on_base_plus_its_rank():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    m = PipelineMetrics()
    m.train_step.labels("1").set(4)
    assert serve_metrics(base, local_rank=1, metrics=m) == base + 1
    body = urllib.request.urlopen(f"http://127.0.0.1:{base + 1}/metrics", timeout=5).read().decode()
    assert 'pipeline_train_step{rank="1"} 4.0' in body
    assert serve_metrics(base, local_rank=1, metrics=m) is None  # the port is taken: a warning, not an error


def test_per_expert_loads_go_to_the_table_and_only_summaries_stay_step_metrics():
    from pipeline_project.training.tracking.run import split_expert_load

    table: dict[str, list] = {}
    metrics = {"loss": 2.0, "expert_load/max_violation": 0.5, "expert_load/layer1/e0": 0.75,
               "expert_load/layer1/e1": 0.25}  # fmt: skip
    summary = split_expert_load(metrics, 3, table)
    assert summary == {"loss": 2.0, "expert_load/max_violation": 0.5, "expert_load/layer1/max_violation": 0.5}
    assert table == {"step": [3, 3], "router": ["layer1", "layer1"], "expert": [0, 1], "load": [0.75, 0.25]}
