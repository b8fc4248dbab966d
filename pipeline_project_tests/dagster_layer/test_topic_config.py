"""The token topic has one owner: `streaming.topic.TopicSpec`. Dagster's config of it (`TopicConfig`) mirrors its
fields and defaults, and hands the spec on whole (to the producer, the doctor and the trainer's job)."""

from __future__ import annotations

from pipeline_project.defs.resources.layout import PipelineLayout, TopicConfig
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.produce.fim import FimConfig, FimPolicy
from pipeline_project.streaming.topic import TopicSpec

FIM_FIELDS = {"fim_code_rate", "fim_mode", "fim_seed"}  # TopicSpec.fim, as three fields of config


def test_the_config_mirrors_the_spec_field_by_field():
    spec_fields = set(TopicSpec.model_fields) - {"fim"}
    assert set(TopicConfig.model_fields) - FIM_FIELDS == spec_fields
    assert TopicConfig().spec() == TopicSpec()
    for name in spec_fields:
        assert TopicConfig.model_fields[name].default == TopicSpec.model_fields[name].default, name


def test_fim_becomes_the_code_domains_policy():
    spec = TopicConfig(name="t", seq_len=64, fim_code_rate=0.1, fim_seed=7).spec()
    assert spec.fim == FimPolicy(domains={"code": FimConfig(rate=0.1, mode="psm")}, seed=7)
    assert (spec.name, spec.seq_len) == ("t", 64)


def test_the_trainer_job_carries_the_layouts_spec_whole():
    layout = PipelineLayout(topic=TopicConfig(name="blocks", seq_len=512, partitions=16))
    job = TrainerResource().job_config(
        kafka=KafkaSettings(bootstrap_servers="k:1"), topic=layout.topic_spec, s3_endpoint=None, bucket="b",
        checkpoint_prefix="c", mlflow_tracking_uri="http://m", dagster_run_id="r", partitions=["p"],
    )  # fmt: skip
    assert job.topic == layout.topic_spec and job.topic.seq_len == 512
    assert "seq_len" not in job.train.model_dump()
