from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.job import JobConfig
from pipeline_project.training.positions import offsets_consumed, positions
from pipeline_project.training.tracking.run import flatten


def _state(rank: int, cursors: dict[int, tuple[int, int]]) -> dict:
    return {"rank": rank, "partitions": {str(p): {"offset": o, "block": b} for p, (o, b) in cursors.items()}}


def test_offsets_consumed_merges_ranks_and_counts_partly_read_messages():
    starts = [_state(0, {0: (0, 0), 2: (5, 3)}), _state(1, {1: (7, 0), 3: (4, 0)})]
    ends = [_state(0, {0: (3, 0), 2: (5, 9)}), _state(1, {1: (9, 2), 3: (4, 0)})]
    assert offsets_consumed(starts, ends) == {"0": [0, 3], "1": [7, 10], "2": [5, 6]}
    assert positions(ends) == {
        "0": {"offset": 3, "block": 0},
        "1": {"offset": 9, "block": 2},
        "2": {"offset": 5, "block": 9},
        "3": {"offset": 4, "block": 0},
    }


def test_positions_of_ranks_sharing_a_partition_are_their_union():
    from pipeline_project.streaming.load.stripes import stripe_of

    # partition 0 read by two ranks (stripes 0 and 1 of 2): stripe 1 got further than stripe 0
    slow = 2
    fast = next(o for o in range(10, 40) if stripe_of(o, 2) == 1)

    def striped(rank, offset):
        return {"rank": rank, "partitions": {"0": {"offset": offset, "block": 0, "stripe": [rank, 2]}}}

    starts = [striped(0, 0), striped(1, 0)]
    ends = [striped(0, slow), striped(1, fast + 1)]
    end = positions(ends)["0"]
    first_open = next(o for o in range(slow, 40) if stripe_of(o, 2) == 0)
    assert end["offset"] == first_open
    assert end["done"][-1][1] == fast + 1  # stripe 1's messages above the union's offset stay counted as read
    assert offsets_consumed(starts, ends) == {"0": [0, fast + 1]}


def test_job_config_carries_the_topic_spec_whole_and_unbounded_steps():
    job = JobConfig.model_validate(
        {
            "kafka": {"bootstrap_servers": "k:9092"},
            "topic": {"name": "t", "seq_len": 64},
            "train": {"max_steps": 0, "preset": {"name": "small"}},
        }
    )
    assert job.topic.seq_len == 64 and job.train.max_steps is None and job.train.preset.name == "small"
    for other in ({"unknown": 1}, {"seq_len": 64}, {"train": {"seq_len": 64}}):  # the block length has one owner
        with pytest.raises(ValidationError):
            JobConfig.model_validate({"kafka": {"bootstrap_servers": "k:9092"}, "topic": {"name": "t"}, **other})


def test_flatten_makes_comparable_param_names():
    assert flatten({"model": {"hidden_size": 64, "rope": {"theta": 1e4}}, "lr": 3e-4, "name": "x", "empty": {}}) == {
        "model.hidden_size": "64",
        "model.rope.theta": "10000.0",
        "lr": "0.0003",
        "name": "x",
        "empty": "{}",
    }


def test_job_file_carries_no_kafka_secret_the_trainer_reads_it_from_env(monkeypatch):
    from pipeline_project.defs.resources.trainer import TrainerResource
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.training.job import JobConfig

    kafka = KafkaSettings(
        bootstrap_servers="b:9093", security_protocol="SASL_SSL", sasl_username="u", sasl_password="s3cret"
    )
    job = TrainerResource().job_config(
        kafka=kafka,
        topic=TopicSpec(name="t", seq_len=64),
        s3_endpoint=None,
        bucket="b",
        checkpoint_prefix="c",
        mlflow_tracking_uri="http://m",
        dagster_run_id="r",
        partitions=["p"],
    )
    assert "s3cret" not in str(job)
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "s3cret")
    assert JobConfig.model_validate(job).kafka.sasl_password == "s3cret"


def test_dead_letters_are_counted_when_the_loader_reports_them_and_reach_the_metadata():
    from pipeline_project.training.job import TrainJobResult
    from pipeline_project.training.reporting import materialization_metadata
    from pipeline_project.training.run import dead_letter_count

    class Loader:
        def __init__(self, metrics):
            self._metrics = metrics

        def metrics(self):
            return self._metrics

    assert dead_letter_count(Loader({"lag_total": 0, "dead_letters": 3})) == 3
    assert dead_letter_count(Loader({"lag_total": 0})) == 0  # a loader that does not count them
    result = TrainJobResult(
        status="trained", message="m", steps=1, start_step=0, end_step=1, tokens=64, final_loss=1.0,
        offsets_consumed={}, start_position={}, end_position={}, checkpoint_uri="s3://b/c/", hf_uri=None,
        resumed_from=None, mlflow_run_id=None, mlflow_run_url=None, mlflow_model_uri=None, world_size=1,
        device="cpu", tokens_per_s=None, data_wait_fraction=None, stop_reason="data_exhausted", wall_s=1.0,
        dead_letters=3, mlflow_error="start the run: ConnectionError",
    )  # fmt: skip
    metadata = materialization_metadata(result)
    assert metadata["dead_letters"] == 3 and metadata["mlflow_error"].startswith("start the run")
