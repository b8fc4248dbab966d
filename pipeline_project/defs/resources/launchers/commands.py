"""The trainer's command lines: the entry point, alone or under torchrun (one node, or several by c10d rendezvous)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeline_project.defs.resources.launchers.config import ENTRYPOINT, JOB_CONFIG_ENV, RDZV_PORT

if TYPE_CHECKING:
    from pipeline_project.training.job import JobConfig


def trainer_env(job: JobConfig) -> dict[str, str]:
    """What the launcher adds to the trainer's environment: the job itself, and unbuffered output."""
    return {JOB_CONFIG_ENV: job.model_dump_json(), "PYTHONUNBUFFERED": "1"}


def entry_args(gpus: int = 0) -> list[str]:
    """The entry point's arguments; a launch that asks for GPUs also makes it refuse to train without CUDA."""
    return ["-m", ENTRYPOINT, "--config-env", JOB_CONFIG_ENV, *(["--require-cuda"] if gpus > 0 else [])]


def orphan_guard(signal: str = "KILL") -> list[str]:
    """A prefix that has the kernel send the trainer `signal` when the process that started it dies (util-linux's
    `setpriv --pdeathsig`): a killed run worker leaves no trainer behind, training the lineage beside the run's
    retry. One process gets KILL: a SIGTERM it inherited as ignored (a parent's SIG_IGN survives exec) would
    leave it running, and a killed trainer never moved latest.json to a half-uploaded checkpoint. torchrun gets
    TERM, which its own handler takes to stop its ranks. On a cluster the trainer pod's owner reference does the
    same (`owner.py`)."""
    return ["setpriv", "--pdeathsig", signal] if shutil.which("setpriv") else []


def subprocess_command(nproc: int, python: str | None = None, niceness: int = 0) -> list[str]:
    """The local command: the entry point, under `torchrun --standalone` for several processes; under
    `nice -n niceness` when that is above 0; stopped when its run worker dies (`orphan_guard`)."""
    python = python or sys.executable
    nice = ["nice", "-n", str(niceness)] if niceness > 0 else []
    nice += orphan_guard("TERM" if nproc > 1 else "KILL")
    if nproc > 1:
        return [
            *nice,
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            *entry_args(),
        ]
    return [*nice, python, *entry_args()]


def pod_command(gpus: int) -> list[str]:
    """One pod, one node: torchrun with a process per GPU of the pod (one CPU process without GPUs)."""
    return ["torchrun", "--standalone", "--nnodes=1", f"--nproc-per-node={max(1, gpus)}", *entry_args(gpus)]


def multinode_command(
    name: str,
    nodes: int,
    gpus: int,
    *,
    endpoint: str | None = None,
    max_restarts: int = 0,
    torchrun: Sequence[str] = ("torchrun",),
    require_cuda: bool | None = None,
) -> list[str]:
    """torchrun across `nodes` nodes of `max(1, gpus)` processes each: c10d rendezvous at `endpoint`.

    The JobSet passes no endpoint: the first pod's stable DNS name. Other transports (the namespace cluster's
    `cluster exec`, docs/cluster.md) name the first node's host and how torchrun is started there. c10d assigns
    the node ranks itself (torchrun ignores --node-rank for it); NODE_RANK is in the env for logs. With
    `max_restarts`, torchrun restarts every node's workers after a failure, re-forming the group.
    `require_cuda` (default: `gpus > 0`) makes the ranks refuse to train without CUDA; CPU ranks pass False.
    """
    endpoint = endpoint or f"{name}-node-0-0.{name}:{RDZV_PORT}"
    restarts = [f"--max-restarts={max_restarts}"] if max_restarts else []
    return [
        *torchrun,
        f"--nnodes={nodes}",
        f"--nproc-per-node={max(1, gpus)}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={name}",
        *restarts,
        *entry_args(gpus if require_cuda is None else int(require_cuda)),
    ]
