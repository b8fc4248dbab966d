"""MLflow logging without a server: metrics go to the async queue and never block the step, a failed batch
surfaces at the next flush (so the trainer turns MLflow off), `end()` waits a bounded time; the lineage helpers."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
from mlflow.utils.async_logging.run_operations import RunOperations

from pipeline_project.training.tracking.callback import _overlaps
from pipeline_project.training.tracking.lineage import _common_dir, lineage_tags
from pipeline_project.training.tracking.run import MlflowRun, gpu_metrics_source


class _AsyncClient:
    """Records log_batch calls; each returns futures that the test completes (or fails) when it likes."""

    def __init__(self):
        self.batches: list[list] = []
        self.futures: list[concurrent.futures.Future] = []
        self.terminated = None
        self.answering = False  # True: new batches are logged at once

    def answer_all(self):
        self.answering = True
        for future in self.futures:
            if not future.done():
                future.set_result(None)

    def log_batch(self, run_id, metrics=(), params=(), tags=(), synchronous=None):
        assert synchronous is False
        self.batches.append(list(metrics))
        future = concurrent.futures.Future()
        self.futures.append(future)
        if self.answering:
            future.set_result(None)
        return RunOperations([future])

    def set_terminated(self, run_id, status=None):
        self.terminated = status


def _run(client, **kw) -> MlflowRun:
    return MlflowRun(client, "http://mlflow", "1", "run-1", flush_every=2, **kw)


def test_metrics_are_queued_without_waiting_and_drained_at_the_end():
    client = _AsyncClient()
    run = _run(client)
    t0 = time.perf_counter()
    for step in range(1, 5):
        run.log_metrics({"loss": 1.0 / step}, step=step)
    assert time.perf_counter() - t0 < 0.5  # nothing waited on the (never answering) server
    assert [len(b) for b in client.batches] == [2, 2]
    client.answer_all()
    run.log_metrics({"loss": 0.1}, step=5)
    run.end()
    assert client.terminated == "FINISHED" and sum(len(b) for b in client.batches) == 5


def test_a_failed_batch_surfaces_at_the_next_flush():
    client = _AsyncClient()
    run = _run(client)
    run.log_metrics({"loss": 1.0}, step=1)
    run.log_metrics({"loss": 0.9}, step=2)
    client.futures[0].set_exception(ConnectionError("mlflow went away"))
    run.log_metrics({"loss": 0.8}, step=3)
    with pytest.raises(ConnectionError, match="went away"):
        run.log_metrics({"loss": 0.7}, step=4)


def test_end_waits_a_bounded_time_then_still_ends_the_run():
    client = _AsyncClient()
    run = _run(client, drain_timeout_s=0.2)
    run.log_metrics({"loss": 1.0}, step=1)
    run.log_metrics({"loss": 0.9}, step=2)  # its future never completes
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="still queued"):
        run.end()
    assert time.perf_counter() - t0 < 2 and client.terminated == "FINISHED"


def test_lineage_helpers():
    assert _common_dir(["s3://b/x/one/manifest.json", "s3://b/x/two/manifest.json"]) == "s3://b/x/"
    tags = lineage_tags(dagster_run_id="r1", partitions=["a", "b"], offsets={"0": [0, 5]}, config_hash="h", step=3)
    assert tags == {
        "dagster_run_id": "r1",
        "partitions": "a,b",
        "offsets": '{"0":[0,5]}',
        "config_hash": "h",
        "step": "3",
    }
    consumed = {"0": [10, 20]}
    assert _overlaps({"0": [15, 30]}, consumed) and _overlaps({"0": [0, 10]}, consumed)
    assert not _overlaps({"0": [0, 9]}, consumed) and not _overlaps({"1": [0, 100]}, consumed)
    assert _overlaps({}, consumed)  # offsets unknown: counted as read
    assert gpu_metrics_source("cpu") == "none"


def test_the_kafka_dataset_source_resolves_its_uri_and_reports_an_unreachable_cluster():
    from confluent_kafka import KafkaException

    from pipeline_project.training.tracking.lineage import KafkaTopicSource

    source = KafkaTopicSource("b1:9092,b2:9092", "token-blocks")
    assert KafkaTopicSource._can_resolve(source.uri()) and not KafkaTopicSource._can_resolve("s3://x/y")
    back = KafkaTopicSource._resolve(source.uri())
    assert back.to_dict() == source.to_dict() == KafkaTopicSource.from_dict(source.to_dict()).to_dict()
    with pytest.raises(KafkaException):
        KafkaTopicSource("127.0.0.1:1", "t").load(timeout_s=1.0)
