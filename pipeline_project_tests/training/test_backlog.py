"""The trainer's backlog travels by reference: the job stays small whatever the number of untrained batches."""

from __future__ import annotations

import io

import pytest

from pipeline_project.defs.resources.launchers import trainer_env
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training import backlog
from pipeline_project.training.job import JobConfig

ENV_VALUE_LIMIT = 128 * 1024  # Linux's MAX_ARG_STRLEN: one environment variable or argument


class MemoryS3:
    """put_object / get_object over a dict: the two calls the backlog makes."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **_kwargs) -> None:
        self.objects[(Bucket, Key)] = Body

    def get_object(self, Bucket: str, Key: str) -> dict:
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}


def big_job(n: int) -> JobConfig:
    batches = [f"b20261207T1200{i:07d}-{i:010x}" for i in range(n)]
    return JobConfig(
        kafka=KafkaSettings(bootstrap_servers="kafka:9092"),
        topic=TopicSpec(name="blocks", seq_len=64),
        checkpoint_prefix="checkpoints/deepseek",
        partitions=batches,
        shard_manifests={b: f"s3://pipeline/shards/{b}/manifest.json" for b in batches},
        batch_offsets={b: {str(i % 8): [i, i + 40]} for i, b in enumerate(batches)},
    )


def test_a_job_of_a_hundred_thousand_batches_fits_one_environment_variable_by_reference():
    job = big_job(100_000)
    assert len(trainer_env(job)[next(iter(trainer_env(job)))]) > ENV_VALUE_LIMIT  # inline, it cannot start
    s3 = MemoryS3()
    small = backlog.by_reference(job, s3, "run-1")
    value = next(iter(trainer_env(small).values()))
    assert len(value) < 4096
    assert small.backlog_uri == "s3://pipeline/checkpoints/deepseek/jobs/run-1/backlog.json.zst"
    assert small.backlog_batches == 100_000 and small.partitions == []
    assert backlog.resolved(JobConfig.model_validate_json(value), s3) == job.model_copy(
        update={"backlog_uri": small.backlog_uri, "backlog_batches": 100_000}
    )


def test_a_job_with_no_batches_travels_as_it_is():
    job = big_job(0)
    assert backlog.by_reference(job, MemoryS3(), "run-1") is job


def test_a_backlog_that_does_not_match_the_job_is_refused():
    s3 = MemoryS3()
    small = backlog.by_reference(big_job(10), s3, "run-1")
    with pytest.raises(ValueError, match="holds 10 batches, the job says 11"):
        backlog.resolved(small.model_copy(update={"backlog_batches": 11}), s3)


def test_a_job_names_its_batches_in_one_place_only():
    with pytest.raises(ValueError, match="carries no partitions"):
        JobConfig.model_validate({**big_job(2).model_dump(), "backlog_uri": "s3://pipeline/x"})
