"""torchrun / DDP plumbing: process-group setup from the torchrun environment and small collectives.

The process's place in the job comes from `settings.DistEnv` (RANK, WORLD_SIZE, LOCAL_RANK). Every
collective here is a no-op returning the local value when no process group is up, so the same code runs
as one plain process.

A node is the set of ranks one torchrun agent started: torchrun numbers them contiguously, so a node's ranks are
consecutive and its local rank 0 is global rank `rank - local_rank` (`node_leader`). Work done for
all by one rank (`run_on_main`, `all_succeed`) ends the same way on every rank: when it fails there, the other
ranks raise `RankFailedError` with its message instead of waiting in a collective that never comes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from pipeline_project.settings import DistEnv
from pipeline_project.training.errors import RankFailedError

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo(DistEnv):
    """The torchrun place of this process, once its process group is up."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed() -> DistInfo:
    """Join the process group torchrun describes (WORLD_SIZE > 1): NCCL on CUDA, gloo on CPU."""
    env = DistEnv.from_env()
    if env.world_size <= 1:
        return DistInfo()
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(env.local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", env.local_rank))
        else:
            dist.init_process_group("gloo")
    return DistInfo(rank=env.rank, world_size=env.world_size, local_rank=env.local_rank)


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_scalar(value: float, op: str = "sum", device: torch.device | str = "cpu") -> float:
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return tensor.item()


def all_gather_objects(obj: Any) -> list[Any]:
    """obj from every rank, in rank order (a one-element list when not distributed)."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def node_leader(info: DistEnv) -> int:
    """The global rank of this node's local rank 0."""
    return info.rank - info.local_rank


def node_scratch_dir(work_dir: str | None, info: DistEnv) -> Path:
    """This node's scratch directory: `work_dir`, or a temp dir that the node's local rank 0 makes and shares with
    the node's other ranks (a collective: every rank calls). Each node gets its own, so nodes never share files."""
    mine = work_dir or (tempfile.mkdtemp(prefix="trainer-") if info.local_rank == 0 else None)
    return Path(all_gather_objects(mine)[node_leader(info)])


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def run_on_main(fn: Callable[[], T]) -> T:
    """`fn()` run once, on rank 0, and its result handed to every rank (a collective: every rank calls)."""
    if not is_distributed():
        return fn()
    error: BaseException | None = None
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = (fn(), None)
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other ranks are told
            error, box[0] = exc, (None, _failure(exc))
    dist.broadcast_object_list(box, src=0)
    value, failure = box[0]
    if error is not None:
        raise error
    if failure is not None:
        raise RankFailedError(f"rank 0 failed, so this rank stops too: {failure}")
    return value


def all_succeed(fn: Callable[[], Any] | None) -> None:
    """Run `fn` where it is given (None: nothing to do on this rank), then agree (a collective: every rank calls):
    if it raised on any rank, it raises there and `RankFailedError` on every other rank."""
    error, failure = None, None
    if fn is not None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other ranks are told
            error, failure = exc, _failure(exc)
    failures = all_gather_objects(failure)
    if error is not None:
        raise error
    failed = [(rank, f) for rank, f in enumerate(failures) if f is not None]
    if failed:
        rank, first = failed[0]
        raise RankFailedError(f"rank {rank} failed, so this rank stops too: {first}")


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
