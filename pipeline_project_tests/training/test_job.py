"""The typed trainer hand-off: defaults declared once, secrets out of the job file, torch-free on the Dagster side."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from pipeline_project.defs.resources.mlflow import MlflowResource
from pipeline_project.defs.resources.trainer import TrainerResource
from pipeline_project.settings import DEFAULT_BUCKET, DEFAULT_TRAINING_EXPERIMENT
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training.config import TrainConfig
from pipeline_project.training.errors import CheckpointMismatchError, PresetError, TrainingError
from pipeline_project.training.job import JobConfig
from pipeline_project.training.tracking.run import run_url

SASL = KafkaSettings(
    bootstrap_servers="b:9093", security_protocol="SASL_SSL", sasl_username="u", sasl_password="s3cret"
)


def _job(resource: TrainerResource, kafka: KafkaSettings = SASL) -> JobConfig:
    return resource.job_config(
        kafka=kafka,
        topic=TopicSpec(name="t", seq_len=64),
        s3_endpoint=None,
        bucket="b",
        checkpoint_prefix="c",
        mlflow_tracking_uri="http://m",
        dagster_run_id="r",
        partitions=["p"],
    )


def test_an_unset_resource_keeps_the_train_config_defaults():
    job = _job(TrainerResource())
    defaults = TrainConfig()
    assert job.train == defaults and job.topic.seq_len == 64
    assert (defaults.lr, defaults.min_lr, defaults.warmup_steps) == (3e-3, 3e-4, 10)
    assert job.experiment_name == DEFAULT_TRAINING_EXPERIMENT == MlflowResource(tracking_uri="x").experiment_name
    assert JobConfig(kafka=SASL, topic=TopicSpec(name="t")).bucket == DEFAULT_BUCKET


def test_resource_fields_override_only_when_given():
    resource = TrainerResource(lr=1e-4, warmup_steps=2, max_steps=0, preset="small", experiment_name="e")
    job = _job(resource)
    assert (job.train.lr, job.train.warmup_steps, job.train.max_steps) == (1e-4, 2, None)
    assert job.train.min_lr == TrainConfig().min_lr and job.train.preset.name == "small"
    assert job.experiment_name == "e"


def test_the_resource_hands_a_mixture_to_the_trainer():
    job = _job(TrainerResource(mixture_proportions={"en_web": 0.75, "code": 0.25}, on_domain_exhausted="stop"))
    assert job.train.mixture.proportions == {"code": 0.25, "en_web": 0.75}
    assert job.train.mixture.on_domain_exhausted == "stop"
    assert _job(TrainerResource(mixture_proportions={"zh_web": 1.0})).train.mixture.on_domain_exhausted == "wait"
    assert _job(TrainerResource()).train.mixture is None
    with pytest.raises(ValueError, match="on_domain_exhausted"):
        _job(TrainerResource(on_domain_exhausted="stop"))
    with pytest.raises(ValueError, match="on_domain_exhausted"):  # not one of wait / stop / renormalize
        _job(TrainerResource(mixture_proportions={"en_web": 1.0}, on_domain_exhausted="skip"))


def test_the_job_file_round_trips_without_the_secret(monkeypatch):
    job = _job(TrainerResource())
    text = job.model_dump_json()
    assert "s3cret" not in text and "s3cret" not in str(job.model_dump())
    assert "sasl_password" not in json.loads(text)["kafka"]
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    with pytest.raises(ValidationError):
        JobConfig.model_validate_json(text)  # the trainer has no password: it says so before connecting
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-env")
    again = JobConfig.model_validate_json(text)
    assert again.kafka.sasl_password == "from-env"
    assert again.model_copy(update={"kafka": SASL}).model_dump_json() == text


def test_the_job_schema_imports_neither_torch_nor_dagster():
    code = (
        "import sys, pipeline_project.training.job, pipeline_project.training.tracking.run; "
        "print(sorted(m for m in ('torch', 'dagster', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_training_errors_share_a_base_and_keep_their_builtin():
    assert issubclass(CheckpointMismatchError, TrainingError) and issubclass(CheckpointMismatchError, ValueError)
    assert issubclass(PresetError, TrainingError) and issubclass(PresetError, ValueError)
    with pytest.raises(PresetError):
        from pipeline_project.training.presets import assert_vocab_fits

        assert_vocab_fits(type("Config", (), {"vocab_size": 10})(), 11)


def test_one_run_url_for_trainer_and_resource():
    assert run_url("http://m:5000/", "3", "abc") == "http://m:5000/#/experiments/3/runs/abc"
    assert MlflowResource(tracking_uri="http://m:5000/").run_url("abc", "3") == run_url("http://m:5000", "3", "abc")


def test_the_resource_exposes_mid_run_checkpoints_with_a_default_of_100_steps():
    assert _job(TrainerResource()).train.checkpoint_every == TrainConfig().checkpoint_every == 100
    assert _job(TrainerResource(checkpoint_every=5)).train.checkpoint_every == 5
    assert _job(TrainerResource(checkpoint_every=0)).train.checkpoint_every is None  # only at the end
