"""The settings choose what training trains: the model (a preset or a whole TrainConfig), the lineage and the
hyper-parameters, checked when the definitions load; a triggered run trains them. A test instance, no services."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import dagster as dg
import pytest

from pipeline_project.defs.assets.checkpoint import deepseek_checkpoint
from pipeline_project.defs.resources import build_resources
from pipeline_project.defs.resources.trainer import LINEAGE_TAG, MODEL_TAG, TrainerResource, trainer_from_settings
from pipeline_project.defs.sensors.checkpoint_trigger import checkpoint_trigger_sensor
from pipeline_project.settings import Settings
from pipeline_project.training.config import TrainConfig
from pipeline_project_tests.dagster_layer.standins import without_postgres
from pipeline_project_tests.dagster_layer.test_training_concurrency import _enough_untrained_tokens

TEAM = {
    "PIPELINE_TRAIN_MODEL": "small",
    "PIPELINE_LINEAGE": "team-a",
    "PIPELINE_TRAIN_LR": "2e-4",
    "PIPELINE_TRAIN_MIN_LR": "2e-5",
    "PIPELINE_TRAIN_WARMUP_STEPS": "500",
    "PIPELINE_TRAIN_DECAY_STEPS": "50000",
    "PIPELINE_TRAIN_BATCH_SIZE": "16",
    "PIPELINE_TRAIN_CHECKPOINT_EVERY": "250",
    "PIPELINE_TRAIN_PARALLELISM": "fsdp",
}


@pytest.fixture
def env(monkeypatch):
    def setenv(values: dict[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return setenv


def test_unset_settings_train_the_train_config_defaults():
    trainer = trainer_from_settings(Settings())
    assert trainer.train_config() == TrainConfig() and trainer.run_name == "deepseek"
    assert trainer.run_tags() == {LINEAGE_TAG: "deepseek", MODEL_TAG: "tiny"}


def test_a_preset_the_lineage_and_the_hyper_parameters_come_from_the_settings(env):
    env(TEAM)
    trainer = build_resources(Settings())["trainer"]
    train = trainer.train_config()
    assert train.preset.name == "small" and trainer.run_name == "team-a"
    assert (train.lr, train.min_lr, train.warmup_steps, train.decay_steps) == (2e-4, 2e-5, 500, 50000)
    assert (train.batch_size, train.checkpoint_every, train.parallelism) == (16, 250, "fsdp")


def test_a_whole_train_config_as_json_or_a_file_with_the_settings_over_it(env, tmp_path):
    config = {"preset": {"name": "small", "overrides": {"num_hidden_layers": 4}}, "lr": 1e-3, "max_steps": 300}
    env({"PIPELINE_TRAIN_MODEL": json.dumps(config), "PIPELINE_TRAIN_LR": "5e-4"})
    trainer = trainer_from_settings(Settings())
    train = trainer.train_config()
    assert train.preset.overrides == {"num_hidden_layers": 4} and train.lr == 5e-4 and train.max_steps == 300
    assert trainer.train_config(max_steps=200).max_steps == 200  # the tightest bound holds
    assert trainer.run_tags()[MODEL_TAG] == "small (with overrides)"
    path = tmp_path / "model.json"
    path.write_text(json.dumps(config))
    env({"PIPELINE_TRAIN_MODEL": str(path)})
    assert trainer_from_settings(Settings()).train_config() == train


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"PIPELINE_TRAIN_MODEL": "huge"}, re.escape("'huge' is neither a preset (tiny, small, from_pretrained)")),
        ({"PIPELINE_TRAIN_MODEL": "from_pretrained"}, "needs `pretrained`"),
        ({"PIPELINE_TRAIN_MODEL": '{"lr": 1e-3,'}, "PIPELINE_TRAIN_MODEL: .* is not valid JSON"),
        ({"PIPELINE_TRAIN_MODEL": '{"learning_rate": 1e-3}'}, "not a valid TrainConfig(.|\n)*learning_rate"),
        ({"PIPELINE_TRAIN_LR": "fast"}, "PIPELINE_TRAIN_LR='fast' is not a number"),
        ({"PIPELINE_TRAIN_BATCH_SIZE": "8.5"}, "PIPELINE_TRAIN_BATCH_SIZE='8.5' is not an integer"),
        ({"PIPELINE_TRAIN_PARALLELISM": "tensor"}, "PIPELINE_TRAIN_(.|\n)*parallelism"),
        ({"PIPELINE_TRAIN_MODEL": '{"betas": [0.9]}'}, "PIPELINE_TRAIN_MODEL(.|\n)*betas"),
        ({"PIPELINE_LINEAGE": "../other"}, "lineage '../other'"),
    ],
)
def test_a_bad_setting_is_refused_with_its_name(env, values, says):
    env(values)
    with pytest.raises(ValueError, match=says):
        build_resources(Settings())


def test_the_definitions_refuse_to_load_with_a_bad_model_setting():
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", "import pipeline_project.definitions"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PIPELINE_TRAIN_MODEL": "huge"},
    )
    assert out.returncode != 0 and "PIPELINE_TRAIN_MODEL='huge' is neither a preset" in out.stderr


def test_a_triggered_run_trains_the_configured_model_on_the_configured_lineage(env, monkeypatch):
    env({**TEAM, "PIPELINE_MIN_NEW_TOKENS": "1000", "PIPELINE_TRIGGER_MAX_STEPS": "120"})
    resources = without_postgres(build_resources(Settings()))
    jobs = []
    monkeypatch.setattr(TrainerResource, "run", lambda self, context, job: jobs.append(job) or dg.MaterializeResult())
    with dg.instance_for_test() as instance:
        _enough_untrained_tokens(instance)
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            (request,) = checkpoint_trigger_sensor(ctx).run_requests
        assert request.tags[LINEAGE_TAG] == "team-a" and request.tags[MODEL_TAG] == "small"
        result = dg.materialize(
            [deepseek_checkpoint], resources=resources, instance=instance, run_config=request.run_config
        )
    assert result.success
    (job,) = jobs
    assert job.train == trainer_from_settings(Settings()).train_config(max_steps=120)
    assert job.train.preset.name == "small" and job.train.parallelism == "fsdp" and job.train.max_steps == 120
    assert job.checkpoint_prefix == "checkpoints/team-a" and job.registered_model_name == "team-a"
    assert job.mlflow_run_name.startswith("team-a-") and job.partitions == ["b1"]
