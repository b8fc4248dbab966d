"""Which device a rank trains on, and a loud refusal when a GPU was asked for and torch cannot use one.

`TrainConfig.device`: "cuda" (every launch that requests GPUs sets it) needs a working CUDA device for this
rank's local rank, else `CudaUnavailableError` with one line naming torch's CUDA build, the node's NVIDIA driver and
the driver that build needs; "auto" (local runs) takes CUDA when torch can use it and the CPU otherwise; "cpu".

Why loud: a CUDA 13 wheel on an R570 driver imports fine and reports no GPU, so "auto" would train on eight CPU
ranks for a day while eight GPUs idle.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from pipeline_project.training.config import TrainConfig
from pipeline_project.training.errors import CudaUnavailableError

# The oldest driver branch each CUDA major release runs on (NVIDIA's CUDA toolkit release notes, table 3:
# "CUDA minor version compatibility"): 13.x needs R580, 12.x R525.
MIN_DRIVER = {13: 580, 12: 525}
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def driver_version(version_file: Path = DRIVER_VERSION_FILE) -> str | None:
    """The loaded NVIDIA kernel module's version ("580.65.06"), or None when no NVIDIA driver is loaded."""
    try:
        first = version_file.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:02 UTC 2025"
    words = [w for w in first.split() if w[:1].isdigit() and "." in w]
    return words[0] if words else None


def cuda_problem(local_rank: int, version_file: Path = DRIVER_VERSION_FILE) -> str | None:
    """Why this rank cannot train on CUDA, in one line; None when it can."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > local_rank:
        return None
    build = torch.version.cuda
    driver = driver_version(version_file)
    needs = MIN_DRIVER.get(int(build.split(".")[0])) if build else None
    parts = [
        f"device=cuda, but torch {torch.__version__} cannot use GPU {local_rank}:",
        f"{count} visible," if count else "no GPU visible,",
        f"torch built for CUDA {build}" if build else "torch built without CUDA",
        f"(needs NVIDIA driver >= {needs})," if needs else ",",
        f"driver on this node: {driver}" if driver else "no NVIDIA driver loaded on this node",
    ]
    reason = next((str(w.message).split("\n")[0] for w in caught if "CUDA" in str(w.message)), None)
    return " ".join(parts) + (f" (torch: {reason})" if reason else "")


def resolve_device(cfg: TrainConfig, local_rank: int = 0) -> torch.device:
    if cfg.device == "cuda":
        problem = cuda_problem(local_rank)
        if problem:
            raise CudaUnavailableError(problem)
        return torch.device("cuda", local_rank)
    if cfg.device == "auto" and torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
