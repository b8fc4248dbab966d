"""Full up -> status -> down cycles on a throw-away s3-only stack (temp state dir, free port).

The shared stack on the default ports is never touched here.
"""

from __future__ import annotations

import os
import socket

import psutil
import pytest
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.stack import Stack, StackConfig, StackError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def s3_stack(tmp_path):
    stack = Stack(StackConfig(state_dir=tmp_path / "state", s3_port=free_port()))
    yield stack
    stack.down(["s3"], wipe=True)


def _put_and_read(stack: Stack, key: str, body: bytes | None = None) -> bytes | None:
    client = stack.services["s3"].client()
    if body is not None:
        client.put_object(Bucket="pipeline", Key=key, Body=body)
    try:
        return client.get_object(Bucket="pipeline", Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return None


def test_s3_up_status_down_keeps_data_until_wipe(s3_stack: Stack):
    started = s3_stack.up(["s3"], timeout=120)
    assert started == ["s3"]
    (status,) = s3_stack.status(["s3"])
    assert status.healthy and status.url == s3_stack.config.s3_endpoint and status.pid is not None
    pid = status.pid
    assert _put_and_read(s3_stack, "raw/kept.txt", b"hello") == b"hello"

    assert s3_stack.down(["s3"]) == ["s3"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    (status,) = s3_stack.status(["s3"])
    assert not status.healthy and status.pid is None

    s3_stack.up(["s3"], timeout=120)
    assert _put_and_read(s3_stack, "raw/kept.txt") == b"hello", "data must survive down without --wipe"

    s3_stack.down(["s3"], wipe=True)
    assert not (s3_stack.state_dir / "s3").exists()
    assert all(not mp.is_running() for mp in s3_stack.processes(["s3"]))


def test_up_is_idempotent_for_a_running_service(s3_stack: Stack):
    s3_stack.up(["s3"], timeout=120)
    pid = s3_stack.process("s3").pid
    assert s3_stack.up(["s3"], timeout=30) == []
    assert s3_stack.process("s3").pid == pid


@pytest.mark.stack  # s3proxy's jar, from setup
def test_taken_port_is_a_one_line_error_naming_port_and_owner(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        stack = Stack(StackConfig(state_dir=tmp_path, s3_port=port))
        with pytest.raises(StackError) as err:
            stack.up(["s3"], timeout=30)
        message = str(err.value)
        assert f"port {port}" in message and f"pid {os.getpid()}" in message and "\n" not in message
        assert not stack.process("s3").is_running()

        result = CliRunner().invoke(
            app, ["stack", "up", "--services", "s3", "--state-dir", str(tmp_path), "--s3-port", str(port)]
        )
    assert result.exit_code == 1
    assert f"port {port} needed by s3 is already taken by pid {os.getpid()}" in result.output
    assert "Traceback" not in result.output


def test_status_exits_non_zero_when_a_service_is_down(tmp_path):
    port = free_port()
    result = CliRunner().invoke(
        app,
        ["stack", "status", "--services", "s3", "--json", "--state-dir", str(tmp_path)],
        env={"PIPELINE_S3_PORT": str(port)},
    )
    assert result.exit_code == 1
    assert '"healthy": false' in result.output and f"127.0.0.1:{port}" in result.output


def test_s3proxy_logs_warnings_only(s3_stack: Stack):
    s3_stack.up(["s3"], timeout=120)
    for i in range(5):
        assert _put_and_read(s3_stack, f"raw/log-{i}.txt", b"x") == b"x"
    log = (s3_stack.state_dir / "s3" / "s3proxy.log").read_text()
    assert " DEBUG " not in log and " INFO " not in log, log[-2000:]
    assert "filesystem storage backend deprecated" in log  # a WARN line still comes through
