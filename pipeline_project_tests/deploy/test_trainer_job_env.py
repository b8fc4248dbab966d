"""The job config reaches the real trainer entry point without a local file: only in an environment variable,
as both launchers pass it. `--print-config` makes the trainer validate and echo it, touching no service."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline_project.defs.resources.launchers import JOB_CONFIG_ENV, entry_args
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.training.job import JobConfig
from pipeline_project_tests.deploy.helpers import REPO


def _job() -> JobConfig:
    kafka = KafkaSettings(bootstrap_servers="k1:9093,k2:9093", security_protocol="SASL_SSL", sasl_username="pipeline",
                          sasl_password="from-the-env", ssl_ca_location="/etc/kafka-ca/ca.crt")  # fmt: skip
    return JobConfig.model_validate(
        {
            "train": {"preset": {"name": "tiny"}, "max_steps": 7, "lr": 1e-3},
            "kafka": kafka,
            "topic": {"name": "token-blocks", "seq_len": 128},
            "s3_endpoint": "http://s3:80",
            "bucket": "pipeline",
            "checkpoint_prefix": "checkpoints/deepseek",
            "mlflow_tracking_uri": "http://mlflow:5000",
            "dagster_run_id": "run-123",
            "partitions": ["b-1", "b-2"],
        }
    )


def _run(args: list[str], env_extra: dict[str, str], cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {JOB_CONFIG_ENV, "KAFKA_SASL_PASSWORD"}}
    return subprocess.run(
        [sys.executable, *args], env={**env, **env_extra}, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_job_reaches_the_trainer_in_an_env_var_only(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-the-env")  # for reading the echo back here
    job = _job()
    env = {JOB_CONFIG_ENV: job.model_dump_json(), "KAFKA_SASL_PASSWORD": "from-the-env", "PYTHONPATH": str(REPO)}
    done = _run([*entry_args(), "--print-config"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    echoed = JobConfig.model_validate_json(done.stdout.strip().splitlines()[-1])
    assert echoed == job
    assert "from-the-env" not in done.stdout  # the trainer takes the password from its environment, never prints it
    assert list(tmp_path.iterdir()) == []  # no file was needed, none was written


def test_a_missing_job_variable_is_a_clear_error(tmp_path):
    done = _run([*entry_args(), "--print-config"], {"PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode != 0
    assert f"--config-env {JOB_CONFIG_ENV}" in done.stderr


def test_the_file_route_still_works(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-the-env")
    job = _job()
    path = tmp_path / "job.json"
    path.write_text(job.model_dump_json())
    done = _run(["-m", "pipeline_project.training.entrypoint", "--config", str(path), "--print-config"],
                {"KAFKA_SASL_PASSWORD": "from-the-env", "PYTHONPATH": str(REPO)}, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert JobConfig.model_validate_json(done.stdout.strip().splitlines()[-1]) == job
