"""With the local stack running and nothing set, every client finds its S3 without `eval "$(stack env)"`; the local
keys never go anywhere but the local endpoint; without a local S3, the doctor's hint names the real cause."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import psutil
import pytest

from pipeline_project.ops.doctor import check_s3
from pipeline_project.settings import LOCAL_S3_ACCESS_KEY, Settings
from pipeline_project.stack.discovery import running_local_s3, with_local_s3

CLIENT_VARS = ("PIPELINE_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(autouse=True)
def _own_boto3_session(monkeypatch):
    """boto3's default session keeps the credential chain of the environment it was made in: give these tests,
    which change that environment, a session of their own and leave the default one as it was."""
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


def _fresh_shell_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "MLFLOW_", "AWS_", "KAFKA_"))}
    return {**env, "AWS_EC2_METADATA_DISABLED": "true", **extra}


@pytest.mark.stack
def test_doctor_in_a_fresh_shell_finds_the_running_local_stack(local_stack):
    """The bug: two FAIL lines (NoCredentialsError, AWS S3) on a healthy stack, in a shell without `stack env`."""
    env = _fresh_shell_env(PIPELINE_STATE_DIR=str(local_stack.state_dir))
    out = subprocess.run(
        [sys.executable, "-m", "pipeline_project.cli.app", "doctor", "--timeout", "5"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    s3_lines = [line for line in out.stdout.splitlines() if "s3.bucket" in line]
    assert len(s3_lines) == 2, out.stdout + out.stderr
    assert all(line.startswith("ok") and local_stack.config.s3_endpoint in line for line in s3_lines), s3_lines


@pytest.mark.stack
def test_shell_aws_keys_never_replace_the_stack_keys_on_its_endpoint(local_stack, monkeypatch):
    for name in CLIENT_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIPELINE_STATE_DIR", str(local_stack.state_dir))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALACCOUNT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "real-secret")
    s = with_local_s3(Settings())
    assert (s.s3_endpoint, s.s3_access_key) == (local_stack.config.s3_endpoint, LOCAL_S3_ACCESS_KEY)
    assert all(c.ok for c in check_s3(s)), check_s3(s)
    # An endpoint chosen by the user is the user's: the stack's keys never go there.
    monkeypatch.setenv("PIPELINE_S3_ENDPOINT", "https://s3.eu-west-1.amazonaws.com")
    assert (with_local_s3(Settings()).s3_endpoint, with_local_s3(Settings()).s3_access_key) == (
        "https://s3.eu-west-1.amazonaws.com",
        "AKIAREALACCOUNT",
    )


def _fake_stack(state_dir, pid: int, create_time: float, endpoint: str = "http://127.0.0.1:19000"):
    s3 = state_dir / "s3"
    s3.mkdir(parents=True)
    (s3 / "s3proxy.pid").write_text(json.dumps({"pid": pid, "create_time": create_time, "cmd": ["java"]}))
    (s3 / "s3proxy.properties").write_text(
        f"s3proxy.endpoint={endpoint}\ns3proxy.identity=pipeline\ns3proxy.credential=pipeline-secret\n"
    )


def test_a_stale_or_foreign_local_s3_record_is_not_used(tmp_path):
    me = psutil.Process()
    _fake_stack(tmp_path / "live", me.pid, me.create_time())
    assert running_local_s3(tmp_path / "live").endpoint == "http://127.0.0.1:19000"
    _fake_stack(tmp_path / "reused-pid", me.pid, me.create_time() - 100)  # the pid now belongs to another process
    _fake_stack(tmp_path / "remote", me.pid, me.create_time(), endpoint="https://s3.example.com")
    for name in ("reused-pid", "remote", "absent"):
        assert running_local_s3(tmp_path / name) is None, name


def test_without_a_local_s3_the_hint_names_the_missing_credentials(tmp_path, monkeypatch):
    for name in CLIENT_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIPELINE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    checks = check_s3(with_local_s3(Settings()), timeout_s=2)
    assert checks and not any(c.ok for c in checks)
    assert all("PIPELINE_S3_ENDPOINT is unset and no local stack S3 runs" in c.hint for c in checks), checks
