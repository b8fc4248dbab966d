"""A job that asks for CUDA where torch cannot use it fails at once, loudly, on every rank; `auto` stays CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipeline_project.defs.resources.launchers.commands import multinode_command, pod_command
from pipeline_project.training.devices import MIN_DRIVER, cuda_problem, driver_version, resolve_device
from pipeline_project.training.entrypoint import NO_CUDA_EXIT
from pipeline_project.training.errors import CudaUnavailableError
from pipeline_project_tests.training.helpers import tiny_config

REPO = Path(__file__).resolve().parents[2]
R570 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Mar 14 18:08:28 UTC 2025\nGCC version: 12\n"
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="these cases are about a node without usable CUDA")


def test_the_driver_version_is_read_from_the_kernel_module(tmp_path):
    (tmp_path / "version").write_text(R570)
    assert driver_version(tmp_path / "version") == "570.133.20"
    assert driver_version(tmp_path / "absent") is None


def test_the_reason_names_the_cuda_build_the_driver_it_needs_and_the_nodes_driver(tmp_path):
    (tmp_path / "version").write_text(R570)
    line = cuda_problem(0, tmp_path / "version")
    assert "\n" not in line
    assert f"CUDA {torch.version.cuda}" in line and "driver on this node: 570.133.20" in line
    assert f">= {MIN_DRIVER[int(torch.version.cuda.split('.')[0])]}" in line
    assert "no NVIDIA driver loaded" in cuda_problem(0, tmp_path / "absent")


def test_cuda_is_refused_and_auto_falls_back_to_the_cpu():
    with pytest.raises(CudaUnavailableError, match="device=cuda, but torch"):
        resolve_device(tiny_config(device="cuda"))
    assert resolve_device(tiny_config(device="auto")) == torch.device("cpu")


def test_every_launch_that_requests_gpus_makes_the_trainer_require_cuda():
    assert "--require-cuda" in pod_command(8) and "--require-cuda" in multinode_command("run", 2, 8)
    assert "--require-cuda" not in pod_command(0) and "--require-cuda" not in multinode_command("run", 2, 0)
    assert "--require-cuda" not in multinode_command("run", 2, 2, require_cuda=False)  # CPU ranks (cluster harness)


def test_a_gpu_launch_without_cuda_exits_non_zero_on_every_rank_before_touching_a_service(tmp_path):
    job = {
        "train": tiny_config(device="auto").model_dump(mode="json"),  # the launch's --require-cuda decides
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},  # nothing listens: a rank that got this far would hang
        "topic": {"name": "tokens"},
        "s3_endpoint": "http://127.0.0.1:1",
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "pipeline_project.training.entrypoint", "--config", str(tmp_path / "job.json"), "--require-cuda"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    refusals = [line for line in proc.stderr.splitlines() if line.startswith("trainer: device=cuda, but torch")]
    assert len(refusals) == 2, proc.stderr[-3000:]  # one line per rank
    assert f"exitcode  : {NO_CUDA_EXIT}" in proc.stderr  # torchrun's report of the failed ranks
